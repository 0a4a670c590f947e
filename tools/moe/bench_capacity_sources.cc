#include "bench_capacity_sources.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "moe/stats/expert_load_stats.h"

namespace moe::cli {
namespace {

using nlohmann::json;

constexpr int kDeepseekTopK = 8;  // DeepSeek-V3 num_experts_per_tok (SGLang files: top-8)

// Checks one count vector: `n` finite, non-negative numbers.
std::string check_counts(const json& v, size_t n, std::vector<double>* out) {
  if (!v.is_array()) return "is not a list of numbers";
  if (v.size() != n) return "has " + std::to_string(v.size()) + " entries, expected " + std::to_string(n);
  out->resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (!v[i].is_number()) return "entry " + std::to_string(i) + " is not a number";
    const double c = v[i].get<double>();
    if (!std::isfinite(c) || c < 0) return "entry " + std::to_string(i) + " is negative or not finite";
    (*out)[i] = c;
  }
  return "";
}

bool all_zero(const std::vector<double>& v) {
  return std::all_of(v.begin(), v.end(), [](double c) { return c == 0; });
}

std::string load_sglang(const std::string& path, const json& j, std::vector<Source>* out) {
  StatusOr<SglangLogicalCount> sg = parse_sglang_logical_count(j, path);
  if (!sg.ok()) return sg.status().message();
  Source s;
  s.file = path;
  const std::string stem = std::filesystem::path(path).stem().string();
  s.name = "deepseek-v3 " + stem;
  s.group = stem.rfind("prefill", 0) == 0 ? "DeepSeek-V3 prefill"
            : stem.rfind("decode", 0) == 0 ? "DeepSeek-V3 decode"
                                            : "DeepSeek-V3";
  s.E = sg->num_experts();
  s.k = kDeepseekTopK;
  if (s.E < s.k) return path + ": " + std::to_string(s.E) + " experts per layer, fewer than top-8";
  s.skipped = static_cast<int>(sg->zero_layers.size());
  for (size_t l = 0; l < sg->layer_ids.size(); ++l) {
    s.layer_names.push_back("L" + std::to_string(sg->layer_ids[l]));
    s.counts.emplace_back(sg->counts[l].begin(), sg->counts[l].end());
  }
  out->push_back(std::move(s));
  return "";
}

std::string load_olmoe(const std::string& path, const json& j, const std::vector<std::string>& models,
                       std::vector<Source>* out) {
  const json& ms = j["models"];
  if (!ms.is_object()) return path + ": 'models' is not an object";
  for (const std::string& m : models) {
    if (!ms.contains(m)) {
      std::string have;
      for (auto it = ms.begin(); it != ms.end(); ++it) have += (have.empty() ? "" : ", ") + it.key();
      return "--olmoe-models: " + path + " has no model '" + m + "' (it has " + have + ")";
    }
    const json& mj = ms[m];
    if (!mj.is_object() || !mj.contains("num_experts") || !mj["num_experts"].is_number_integer() ||
        !mj.contains("top_k") || !mj["top_k"].is_number_integer() || !mj.contains("topk") ||
        !mj["topk"].is_object()) {
      return path + ": models." + m + " needs integer num_experts, top_k and a 'topk' object";
    }
    const int E = mj["num_experts"].get<int>(), k = mj["top_k"].get<int>();
    if (E < 1 || k < 1 || k > E) return path + ": models." + m + ": bad num_experts/top_k";
    const std::string display = mj.value("model", m);
    const std::string group = display.substr(0, display.find(' ')) + " (k=" + std::to_string(k) + ")";
    for (auto dom = mj["topk"].begin(); dom != mj["topk"].end(); ++dom) {
      if (!dom.value().is_object()) return path + ": models." + m + ".topk." + dom.key() + " is not an object";
      Source s;
      s.file = path;
      s.name = m + " " + dom.key();
      s.group = group;
      s.E = E;
      s.k = k;
      // Layers in numeric order ("layer_0", "layer_7", "layer_15").
      std::vector<std::pair<int, std::string>> names;
      for (auto ly = dom.value().begin(); ly != dom.value().end(); ++ly) {
        const std::string key = ly.key();
        int num = -1;
        if (key.rfind("layer_", 0) == 0) num = std::atoi(key.c_str() + 6);
        names.push_back({num, key});
      }
      std::sort(names.begin(), names.end());
      for (const auto& [num, key] : names) {
        std::vector<double> c;
        const std::string where = path + ": models." + m + ".topk." + dom.key() + "." + key;
        if (std::string bad = check_counts(dom.value()[key], static_cast<size_t>(E), &c); !bad.empty()) {
          return where + " " + bad;
        }
        if (all_zero(c)) {
          ++s.skipped;
          continue;
        }
        s.layer_names.push_back(num >= 0 ? "L" + std::to_string(num) : key);
        s.counts.push_back(std::move(c));
      }
      if (!s.counts.empty()) out->push_back(std::move(s));
    }
  }
  return "";
}

}  // namespace

std::string load_routing_file(const std::string& path, const std::vector<std::string>& olmoe_models,
                              std::vector<Source>* out) {
  std::ifstream in(path);
  if (!in) return "--routing-file " + path + ": cannot open (" + std::strerror(errno) + ")";
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return "--routing-file " + path + ": not valid JSON";
  std::string bad;
  if (j.is_object() && j.contains("logical_count")) {
    bad = load_sglang(path, j, out);
  } else if (j.is_object() && j.contains("models")) {
    bad = load_olmoe(path, j, olmoe_models, out);
  } else {
    bad = "--routing-file " + path +
          ": unrecognised format (expected SGLang's {\"logical_count\": [[...]]} or the OLMoE expert-counts file with "
          "'models')";
  }
  if (!bad.empty() && bad.rfind("--", 0) != 0) bad = "--routing-file " + bad;
  return bad;
}

std::string default_routing_files(const std::string& dir, std::vector<std::string>* files) {
  const std::string olmoe = dir + "/olmoe_paper_expert_counts.json";
  const std::string sg = dir + "/sglang_deepseek_v3_ep_statistics";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(olmoe, ec) || !std::filesystem::is_directory(sg, ec)) {
    return "--routing-dir " + dir + ": the routing data (" + olmoe + ", " + sg +
           "/*.json) is missing: pass --routing-dir DIR or --routing-file PATH";
  }
  files->push_back(olmoe);
  std::vector<std::string> sgl;
  for (const auto& e : std::filesystem::directory_iterator(sg, ec)) {
    if (e.path().extension() == ".json") sgl.push_back(e.path().string());
  }
  std::sort(sgl.begin(), sgl.end());
  files->insert(files->end(), sgl.begin(), sgl.end());
  return "";
}

}  // namespace moe::cli
