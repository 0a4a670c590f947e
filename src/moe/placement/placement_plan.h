// A placement plan: for each MoE layer, which logical expert sits in each physical
// expert slot of each rank (an expert may have several replicas, on distinct ranks).
// Written by `moe placement plan` (src/moe/placement/replica_planner.h makes it) and read back
// by the engine. JSON:
//
//   {"num_experts": E, "num_ranks": R, "slots_per_rank": S,
//    "layers": [{"layer": i, "rank_slots": [[expert ids on rank 0], ...],
//                "replica_count": [ranks holding expert e, per e]}, ...]}
//
// On input only "layers" and each layer's "rank_slots" are required: "layer" defaults
// to the entry's position, "num_ranks" to the length of rank_slots, "slots_per_rank" to
// the longest rank, "num_experts" to the largest id + 1; "replica_count" is recomputed
// and, when present, must agree.
#pragma once

#include <string>
#include <vector>

#include "moe/placement/expert_placement.h"
#include "moe/status.h"

namespace moe {

struct LayerPlan {
  int layer = 0;                             // model layer id (from the load file's "layer", else position)
  std::vector<std::vector<int>> rank_slots;  // [num_ranks][<= slots_per_rank] logical expert ids; an expert
                                             // at most once per rank; unused slots omitted
  std::vector<int> replica_count;            // [num_experts] = number of ranks holding the expert (>= 1)
};

struct PlacementPlan {
  int num_experts = 0;
  int num_ranks = 0;
  int slots_per_rank = 0;
  std::vector<LayerPlan> layers;
};

// Checks a plan: num_experts, num_ranks, slots_per_rank >= 1; at least one layer; layer
// ids >= 0 and unique; per layer: num_ranks rank lists of at most slots_per_rank ids, ids
// in [0, num_experts), no expert twice on one rank, every expert on at least one rank, and
// replica_count[e] == the number of ranks holding e. InvalidArgument naming the layer,
// rank and expert otherwise (e.g. "layers[2]: expert 17 is on no rank").
Status validate_plan(const PlacementPlan& plan);

// replica_count recomputed from rank_slots (num_experts entries; ids out of range ignored).
std::vector<int> count_replicas(const LayerPlan& layer, int num_experts);

// The layer's placement (ExpertPlacement::from_rank_slots(layer.rank_slots, num_experts));
// its errors name the rank and expert.
StatusOr<ExpertPlacement> layer_placement(const LayerPlan& layer, int num_experts);
// The plan file's form of a placement (rank_slots ascending per rank, replica_count).
LayerPlan to_layer_plan(const ExpertPlacement& placement, int layer_id);

// The JSON above, one line per layer, indent 2 elsewhere.
std::string plan_to_json(const PlacementPlan& plan);
// Parses and validates (validate_plan) a plan; errors name `source` and the field, e.g.
// "plan.json: layers[0].rank_slots[3][1]: expert 300 does not exist (num_experts 256)".
StatusOr<PlacementPlan> parse_plan_json(const std::string& text, const std::string& source);
// read_text_file(path) + parse_plan_json(text, path).
StatusOr<PlacementPlan> load_plan_file(const std::string& path);
// Validates, then writes plan_to_json(plan) atomically (write_file_atomically: on failure
// the old file is untouched); Internal naming the path on failure.
Status write_plan_file(const PlacementPlan& plan, const std::string& path);

}  // namespace moe
