// `moe bench capacity`'s inputs: per-expert routing counts from SGLang's logical_count
// files (read with parse_sglang_logical_count) and the OLMoE paper's expert-counts file.
#pragma once

#include <string>
#include <vector>

namespace moe::cli {

// One source: a model's counts for one domain (OLMoE file) or one SGLang file.
struct Source {
  std::string name;   // e.g. "olmoe arxiv", "deepseek-v3 prefill_in512"
  std::string group;  // summary group
  std::string file;
  int E = 0, k = 0;
  int skipped = 0;  // all-zero (dense) layers skipped
  std::vector<std::string> layer_names;
  std::vector<std::vector<double>> counts;  // [layer][expert]
};

// Reads one routing file into `out` (one Source per SGLang file, one per model and domain
// of the OLMoE file, for the models in `olmoe_models`). Returns "" or an error message
// naming --routing-file and the path.
std::string load_routing_file(const std::string& path, const std::vector<std::string>& olmoe_models,
                              std::vector<Source>* out);

// The default files of `dir`: olmoe_paper_expert_counts.json, then
// sglang_deepseek_v3_ep_statistics/*.json sorted. Returns "" or an error naming
// --routing-dir and the missing path.
std::string default_routing_files(const std::string& dir, std::vector<std::string>* files);

}  // namespace moe::cli
