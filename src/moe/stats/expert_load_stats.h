// Per-expert routing load of a run: how many token-expert assignments each expert of
// each MoE layer received, a per-step exponential moving average of it, and the
// tokens the capacity limit dropped or rerouted, and the tokens routed in degraded mode
// (an expert lost with its rank, moe/router.h). Written to and read from JSON
// (`moe stats show|plot` reads it back; src/moe/stats/heatmap_svg.h draws it).
//
// Units: a "token" here is one token-expert assignment, so with top-k routing one
// input token adds k to a layer's counts. Shapes: one row per MoE layer (model layer
// ids that have an MoE block, ascending; dense layers are absent), num_experts
// entries per row, indexed by logical expert id.
//
// Not thread-safe: one writer at a time, no readers during a write. Record from the
// thread that runs the layer (or one object per thread) and merge() afterwards.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "moe/status.h"

namespace moe {

// SGLang's expert-distribution format, {"logical_count": [[count per expert] per layer]}
// (what its expert-distribution recorder writes and --init-expert-location reads). The one
// parser of it: ExpertLoadStats::parse_json, the placement load files (placement/
// load_matrix.h) and `moe bench capacity` all read it through parse_sglang_logical_count.
struct SglangLogicalCount {
  std::vector<int> layer_ids;                // rows with any token: their row index, ascending
  std::vector<std::vector<int64_t>> counts;  // [layer_ids.size()][num_experts] assignments, parallel to layer_ids
  std::vector<int> zero_layers;              // all-zero rows (the dense layers), ascending
  int num_experts() const { return counts.empty() ? 0 : static_cast<int>(counts[0].size()); }
};

// Reads j["logical_count"] (`j`: a parsed JSON object with that field). Counts are
// non-negative integers (integral floats such as 807392.0 are accepted) whose row sums fit
// in int64; every row has the same length. InvalidArgument naming `source` and the field
// ("<source>: logical_count[3][7] must be a non-negative integer (got -1)") when the field
// is not an array, is empty, a row is not an array, is empty or ragged, a count is bad, or
// every row is all zeros. Thread-safe (pure function).
StatusOr<SglangLogicalCount> parse_sglang_logical_count(const nlohmann::json& j, const std::string& source);

class ExpertLoadStats {
 public:
  static constexpr double kDefaultEmaDecay = 0.9;

  // `moe_layer_ids`: the model layer indices with an MoE block (any order, kept
  // sorted; must be >= 0, unique and non-empty); num_experts >= 1; ema_decay in [0, 1).
  // InvalidArgument naming the bad argument otherwise.
  static StatusOr<ExpertLoadStats> create(std::vector<int> moe_layer_ids, int num_experts,
                                          double ema_decay = kDefaultEmaDecay);

  // One forward step of layer `layer_id`: tokens_per_expert[num_experts()] assignments
  // (each >= 0), `dropped` assignments the capacity limit discarded and `rerouted` ones
  // it sent to another expert. Adds them to the run totals, increments steps(layer_id)
  // and updates ema[e] = decay * ema[e] + (1 - decay) * count[e]; the layer's first step
  // (steps == 0) sets ema = count. An unknown layer id, a null pointer or a negative
  // count is a bug (MOE_CHECK). Degraded mode: `degraded_tokens` tokens (input tokens,
  // not assignments) whose top-k held a lost expert, and degraded_per_expert
  // ([num_experts()] or null = none) how many of them wanted each expert; both >= 0,
  // added to the run totals.
  void record_step(int layer_id, const int64_t* tokens_per_expert, int64_t dropped, int64_t rerouted,
                   int64_t degraded_tokens = 0, const int64_t* degraded_per_expert = nullptr);

  // Adaptive top-k and the adaptive_requeue policy (moe/capacity.h), one step
  // of layer `layer_id` (call after record_step; all >= 0): tokens that shed at least one
  // expert under load, the assignments they shed, and assignments run in the second
  // round. Added to the run totals; steps is not incremented.
  void record_adaptive(int layer_id, int64_t adaptive_tokens, int64_t adaptive_dropped, int64_t requeued);

  // Adds another rank's statistics of the same run: totals, ema, dropped and rerouted
  // are summed; steps is the maximum, since ranks step in lockstep (summing the per-rank
  // EMAs of the same steps gives the EMA of the summed counts: the update is linear).
  // InvalidArgument if layer ids, num_experts or ema_decay differ.
  Status merge(const ExpertLoadStats& other);
  // Zeroes every count and the steps; the next step of each layer re-initialises ema.
  void clear();

  const std::vector<int>& layer_ids() const { return layer_ids_; }
  int num_layers() const { return static_cast<int>(layer_ids_.size()); }
  int num_experts() const { return num_experts_; }
  double ema_decay() const { return ema_decay_; }
  bool has_layer(int layer_id) const;
  // False only for statistics parsed from a file without "ema" arrays (an SGLang file
  // or a hand-made one): then ema() rows are zeros. True for create()d objects.
  bool has_ema() const { return has_ema_; }

  // Per layer (by model layer id; an unknown id is a bug, MOE_CHECK):
  // run totals, [num_experts()].
  const std::vector<int64_t>& tokens_per_expert(int layer_id) const;
  // EMA of the per-step counts (assignments per step), [num_experts()].
  const std::vector<double>& ema(int layer_id) const;
  int64_t total_tokens(int layer_id) const;  // sum of tokens_per_expert
  int64_t dropped(int layer_id) const;
  int64_t rerouted(int layer_id) const;
  int64_t degraded_tokens(int layer_id) const;
  int64_t adaptive_tokens(int layer_id) const;   // record_adaptive's run totals
  int64_t adaptive_dropped(int layer_id) const;
  int64_t requeued(int layer_id) const;
  // [num_experts()] run totals of degraded tokens that wanted each (lost) expert.
  const std::vector<int64_t>& degraded_per_expert(int layer_id) const;
  int64_t steps(int layer_id) const;
  // max / mean of tokens_per_expert: 1.0 = perfectly balanced, num_experts() = all on
  // one expert. 1.0 when the layer has no tokens yet (nothing is imbalanced).
  double imbalance(int layer_id) const;
  // The expert with the most tokens (the lowest id on ties; 0 when all are zero).
  int hottest_expert(int layer_id) const;

  // {"layers": [{"layer": i, "tokens_per_expert": [...], "ema": [...], "dropped": n,
  //   "rerouted": n, "steps": n, "degraded_tokens": n, "degraded_per_expert": [...],
  //   "adaptive_tokens": n, "adaptive_dropped": n, "requeued": n, "imbalance": x}, ...], "num_experts": E, "ema_decay": d}
  // with one entry per MoE layer, ascending. indent < 0: one line.
  std::string to_json_string(int indent = -1) const;
  // Writes to_json_string(2) to `path` atomically (write_file_atomically: on failure the
  // old file is untouched); Internal naming the path on failure.
  Status write_json_file(const std::string& path) const;

  // Reads to_json_string()'s format, where only "layers" and each layer's
  // "tokens_per_expert" are required: "layer" defaults to the entry's position, "ema"
  // (in all layers or in none) to zeros with has_ema() false, "dropped", "rerouted",
  // "steps", "degraded_tokens", "adaptive_tokens", "adaptive_dropped" and "requeued" to 0, "degraded_per_expert" (one count per expert) to zeros, "num_experts" to the row length, "ema_decay" to 0.9; "imbalance" is
  // recomputed, not read. Also reads SGLang's expert-distribution format
  // {"logical_count": [[count per expert] per layer]} (as passed to
  // --init-expert-location): the row index is the layer id, and all-zero rows (the dense
  // layers) are left out and, when `skipped_zero_layers` is given, listed there.
  // Counts must be non-negative integers (integral floats such as 12.0 are accepted).
  // InvalidArgument naming `source` and the field (e.g. "layers[3].tokens_per_expert[7]").
  static StatusOr<ExpertLoadStats> parse_json(const std::string& text, const std::string& source,
                                              std::vector<int>* skipped_zero_layers = nullptr);
  // read_text_file(path) + parse_json(text, path, ...).
  static StatusOr<ExpertLoadStats> load_json_file(const std::string& path,
                                                  std::vector<int>* skipped_zero_layers = nullptr);

 private:
  struct Layer {
    std::vector<int64_t> tokens;
    std::vector<double> ema;
    int64_t dropped = 0;
    int64_t rerouted = 0;
    int64_t steps = 0;
    int64_t degraded_tokens = 0;
    std::vector<int64_t> degraded_per_expert;
    int64_t adaptive_tokens = 0, adaptive_dropped = 0, requeued = 0;  // record_adaptive
  };

  ExpertLoadStats() = default;
  int index_of(int layer_id) const;  // MOE_CHECKs that the layer exists
  Layer& layer(int layer_id) { return layers_[static_cast<size_t>(index_of(layer_id))]; }
  const Layer& layer(int layer_id) const { return layers_[static_cast<size_t>(index_of(layer_id))]; }

  std::vector<int> layer_ids_;  // ascending
  std::vector<Layer> layers_;   // parallel to layer_ids_
  int num_experts_ = 0;
  double ema_decay_ = kDefaultEmaDecay;
  bool has_ema_ = true;
};

}  // namespace moe
