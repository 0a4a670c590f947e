// Per-expert load input of the replica planner (`moe placement plan`), from JSON.
#pragma once

#include <string>
#include <vector>

#include "moe/status.h"

namespace moe {

// A per-layer load matrix read from JSON, in one of three formats:
//  {"load": [[per-expert numbers] per layer], "layer_ids": [...] (optional)};
//  SGLang's {"logical_count": [[...] per layer]} (row index = layer id; all-zero rows,
//  the dense layers, are skipped and listed in skipped_zero_layers);
//  `moe generate --stats-out`'s {"layers": [{"layer": i, "tokens_per_expert": [...]}]}.
// Every row must have the same number of entries, each finite and >= 0. InvalidArgument
// naming `source` and the entry (e.g. "load.json: load[2][7] is -1: ...").
struct LoadMatrix {
  std::vector<int> layer_ids;
  std::vector<std::vector<double>> load;  // [layers][experts]
  std::vector<int> skipped_zero_layers;
  int num_experts() const { return load.empty() ? 0 : static_cast<int>(load[0].size()); }
};
StatusOr<LoadMatrix> parse_load_json(const std::string& text, const std::string& source);
StatusOr<LoadMatrix> read_load_file(const std::string& path);

}  // namespace moe
