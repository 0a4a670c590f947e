// moe bench capacity: the fraction of (token, expert) assignments that expert capacity
// drops, vs the capacity factor, for the drop and reroute policies (moe/capacity.h),
// on real routing statistics: the OLMoE paper's per-expert counts (Mixtral-8x7B k=2,
// OLMoE-1B-7B k=8; layers 0/7/15 per text domain) and SGLang's DeepSeek-V3 expert
// loads (61 layers x 256 experts, top-8; the 3 dense layers are skipped).
//
// Only per-expert totals exist, so batches are simulated: every token of a batch of B
// draws its ranked expert list by the Gumbel-top-k trick (score_e = log w_e + Gumbel
// noise, sorted descending; equivalently ascending Exp(1)/w_e, which is what we
// compute), its top-k is the routing and the whole order is `ranked`; the real
// apply_capacity (comm = nullptr) then runs on the batch. Averaged over steps with a
// fixed seed, then over a source's layers.
//
//   moe bench capacity                                  # every default source
//   moe bench capacity --routing-file PATH --batch 4096
#include <omp.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "commands.h"
#include "moe/core/check.h"
#include "moe/moe/capacity.h"

namespace moe::cli {
namespace {

// A double as the user would write it (%g).
std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

using nlohmann::json;

constexpr const char* kRoutingDir = "/work/shared/data/routing";
constexpr int kDeepseekTopK = 8;  // DeepSeek-V3 num_experts_per_tok (SGLang files: top-8)

struct CapacityFlags {
  std::vector<std::string> files;  // empty: the defaults
  std::vector<int> batch = {256, 4096};
  std::vector<double> factors = {0.5, 0.75, 1.0, 1.25, 1.5, 2.0};
  std::vector<std::string> policies = {"drop", "reroute"};
  std::vector<std::string> olmoe_models = {"mistral", "olmoe"};
  std::string sampler = "matched";
  int steps = 0;  // 0: auto
  int threads = 1;
  int64_t seed = 1;
  std::string format = "table";
};

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

std::string fmt(double v, int prec) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", prec, v);
  return buf;
}

std::string validate(const CapacityFlags& f) {
  if (f.batch.empty()) return "--batch needs at least one value";
  for (int b : f.batch) {
    if (b < 1 || b > (1 << 20)) return "--batch values must be in [1, 1048576] (got " + std::to_string(b) + ")";
  }
  if (f.factors.empty()) return "--capacity-factor needs at least one value";
  for (double c : f.factors) {
    if (!std::isfinite(c) || c <= 0 || c > 1e6) {
      return "--capacity-factor values must be numbers in (0, 1e6] (got " + num(c) + ")";
    }
  }
  if (f.policies.empty()) return "--overflow needs at least one value";
  for (const std::string& p : f.policies) {
    if (p != "drop" && p != "reroute") {
      return "--overflow: unknown policy '" + p + "' for the drop study (expected drop or reroute)";
    }
  }
  if (f.sampler != "matched" && f.sampler != "share") {
    return "--sampler must be matched or share (got '" + f.sampler + "')";
  }
  if (f.steps < 0) return "--steps must be >= 0 (0 = auto; got " + std::to_string(f.steps) + ")";
  if (f.threads < 1) return "--threads must be >= 1 (got " + std::to_string(f.threads) + ")";
  if (f.format != "table" && f.format != "json") return "--format must be table or json (got '" + f.format + "')";
  for (const std::string& m : f.olmoe_models) {
    if (m.empty()) return "--olmoe-models: empty model name";
  }
  return "";
}

// ---------------------------------------------------------------------------------------
// Loading.

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
  const json& lc = j["logical_count"];
  if (!lc.is_array() || lc.empty() || !lc[0].is_array() || lc[0].empty()) {
    return path + ": logical_count must be a non-empty list of per-layer lists";
  }
  Source s;
  s.file = path;
  const std::string stem = std::filesystem::path(path).stem().string();
  s.name = "deepseek-v3 " + stem;
  s.group = stem.rfind("prefill", 0) == 0 ? "DeepSeek-V3 prefill"
            : stem.rfind("decode", 0) == 0 ? "DeepSeek-V3 decode"
                                            : "DeepSeek-V3";
  s.E = static_cast<int>(lc[0].size());
  s.k = kDeepseekTopK;
  if (s.E < s.k) return path + ": " + std::to_string(s.E) + " experts per layer, fewer than top-8";
  for (size_t l = 0; l < lc.size(); ++l) {
    std::vector<double> c;
    if (std::string bad = check_counts(lc[l], static_cast<size_t>(s.E), &c); !bad.empty()) {
      return path + ": logical_count[" + std::to_string(l) + "] " + bad;
    }
    if (all_zero(c)) {
      ++s.skipped;
      continue;
    }
    s.layer_names.push_back("L" + std::to_string(l));
    s.counts.push_back(std::move(c));
  }
  if (s.counts.empty()) return path + ": every layer's counts are zero";
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

std::string load_file(const std::string& path, const CapacityFlags& f, std::vector<Source>* out) {
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
    bad = load_olmoe(path, j, f.olmoe_models, out);
  } else {
    bad = "--routing-file " + path +
          ": unrecognised format (expected SGLang's {\"logical_count\": [[...]]} or the OLMoE expert-counts file with "
          "'models')";
  }
  if (!bad.empty() && bad.rfind("--", 0) != 0) bad = "--routing-file " + bad;
  return bad;
}

std::string default_files(std::vector<std::string>* files) {
  const std::string olmoe = std::string(kRoutingDir) + "/olmoe_paper_expert_counts.json";
  const std::string sg = std::string(kRoutingDir) + "/sglang_deepseek_v3_ep_statistics";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(olmoe, ec) || !std::filesystem::is_directory(sg, ec)) {
    return std::string("the default routing data (") + olmoe + ", " + sg +
           "/*.json) is missing: pass --routing-file PATH";
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

// ---------------------------------------------------------------------------------------
// Simulation.

struct Rng {  // splitmix64
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double open01() { return (static_cast<double>(next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
};

uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// The drop policy's dropped assignments for per-expert totals n_e: sum_e max(0, n_e - cap)
// (what apply_capacity computes; checked against it at the table's factors).
int64_t dropped_for(const std::vector<int64_t>& n, int64_t cap) {
  int64_t d = 0;
  for (int64_t v : n) d += std::max<int64_t>(0, v - cap);
  return d;
}

// Smallest factor in [0, hi] with frac(F) < 0.01 for a non-increasing frac, to 1e-3.
template <typename Fn>
double factor_for_one_percent(Fn frac, double hi) {
  if (frac(hi) >= 0.01) return hi;
  double lo = 0;
  while (hi - lo > 1e-3) {
    const double mid = 0.5 * (lo + hi);
    (frac(mid) < 0.01 ? hi : lo) = mid;
  }
  return hi;
}

// Per layer results.
struct LayerSim {
  double real_imbalance = 0, sim_imbalance = 0;
  std::vector<double> bound;               // [factor]
  double bound_f1 = 0;                     // F with bound < 1%
  std::vector<std::vector<double>> drop;   // [batch][factor * P + policy] mean dropped fraction
  std::vector<std::vector<double>> moved;  // same, rerouted fraction
  // Per batch: each step's per-expert totals, for the F-for-1% search.
  std::vector<std::vector<std::vector<int64_t>>> step_counts;  // [batch][step][expert]
};

int steps_for(const CapacityFlags& f, int B) {
  return f.steps > 0 ? f.steps : std::max(1, (4096 + B - 1) / B);
}

LayerSim simulate_layer(const Source& s, size_t layer, const CapacityFlags& f,
                        const std::vector<OverflowPolicy>& policies) {
  const int E = s.E, k = s.k;
  const std::vector<double>& c = s.counts[layer];
  double total = 0, mx = 0;
  for (double v : c) {
    total += v;
    mx = std::max(mx, v);
  }
  LayerSim r;
  r.real_imbalance = mx / (total / E);
  std::vector<double> q(static_cast<size_t>(E)), inv_w(static_cast<size_t>(E));
  for (int e = 0; e < E; ++e) {
    q[static_cast<size_t>(e)] = c[static_cast<size_t>(e)] / total;
    // "share": w = q. "matched": w = -log(1 - k q), so that a token's chance of holding
    // e in its top-k, ~ 1 - exp(-w_e t) with the threshold t ~ 1, is k q_e, the measured
    // marginal (plain shares flatten the skew: a sample without replacement cannot give
    // a heavy expert k q_e).
    const double kq = std::min(k * q[static_cast<size_t>(e)], 1.0 - 1e-9);
    const double w = f.sampler == "share" ? q[static_cast<size_t>(e)] : -std::log1p(-kq);
    inv_w[static_cast<size_t>(e)] = w > 0 ? 1.0 / w : INFINITY;
  }
  auto bound_at = [&](double F) {
    double d = 0;
    for (double v : q) d += std::max(0.0, v - F / E);
    return d;
  };
  for (double F : f.factors) r.bound.push_back(bound_at(F));
  r.bound_f1 = factor_for_one_percent(bound_at, static_cast<double>(E));

  const size_t P = policies.size(), NF = f.factors.size();
  r.drop.assign(f.batch.size(), std::vector<double>(NF * P, 0.0));
  r.moved = r.drop;
  r.step_counts.resize(f.batch.size());
  std::vector<std::pair<double, int>> keys(static_cast<size_t>(E));
  std::vector<int64_t> pooled;  // the largest batch size's counts, pooled over its steps
  const size_t largest = static_cast<size_t>(std::max_element(f.batch.begin(), f.batch.end()) - f.batch.begin());
  for (size_t bi = 0; bi < f.batch.size(); ++bi) {
    const int B = f.batch[bi];
    const int steps = steps_for(f, B);
    const size_t n = static_cast<size_t>(B);
    std::vector<int> topk(n * static_cast<size_t>(k)), ranked(n * static_cast<size_t>(E)), idx(topk.size());
    std::vector<float> w(topk.size());
    std::vector<int64_t> sum(static_cast<size_t>(E), 0);
    StepRoutingCounts counts;
    for (int st = 0; st < steps; ++st) {
      Rng rng{fnv1a(s.name + "/" + s.layer_names[layer] + "/" + std::to_string(B) + "/" + std::to_string(st),
                    static_cast<uint64_t>(f.seed) * 0x9E3779B97F4A7C15ull + 1469598103934665603ull)};
      std::vector<int64_t> per(static_cast<size_t>(E), 0);
      for (size_t t = 0; t < n; ++t) {
        for (int e = 0; e < E; ++e) keys[static_cast<size_t>(e)] = {-std::log(rng.open01()) * inv_w[static_cast<size_t>(e)], e};
        std::sort(keys.begin(), keys.end());  // ties (weight 0: +inf) to the lower id
        int* row = ranked.data() + t * static_cast<size_t>(E);
        for (int e = 0; e < E; ++e) row[e] = keys[static_cast<size_t>(e)].second;
        for (int j = 0; j < k; ++j) {
          topk[t * static_cast<size_t>(k) + static_cast<size_t>(j)] = row[j];
          ++per[static_cast<size_t>(row[j])];
        }
      }
      for (int e = 0; e < E; ++e) sum[static_cast<size_t>(e)] += per[static_cast<size_t>(e)];
      const double assignments = static_cast<double>(B) * k;
      for (size_t fi = 0; fi < NF; ++fi) {
        for (size_t pi = 0; pi < P; ++pi) {
          idx = topk;
          std::fill(w.begin(), w.end(), 1.0f / static_cast<float>(k));
          const CapacityOptions opt{policies[pi], f.factors[fi]};
          const Status status = apply_capacity(opt, nullptr, E, {idx.data(), w.data(), B, k, ranked.data()}, &counts);
          MOE_CHECK(status.ok());
          if (policies[pi] == OverflowPolicy::kDrop) MOE_CHECK(counts.dropped == dropped_for(per, counts.capacity));
          r.drop[bi][fi * P + pi] += static_cast<double>(counts.dropped) / assignments / steps;
          r.moved[bi][fi * P + pi] += static_cast<double>(counts.rerouted) / assignments / steps;
        }
      }
      r.step_counts[bi].push_back(std::move(per));
    }
    if (bi == largest) pooled = sum;
  }
  // Sampled imbalance: max/mean of the pooled counts.
  int64_t ps = 0, pm = 0;
  for (int64_t v : pooled) {
    ps += v;
    pm = std::max(pm, v);
  }
  r.sim_imbalance = ps > 0 ? static_cast<double>(pm) / (static_cast<double>(ps) / E) : 0;
  return r;
}

// Mean over a set of layers of the drop policy's dropped fraction at factor F, batch bi.
double mean_drop_at(const std::vector<const LayerSim*>& layers, size_t bi, int B, int k, int E, double F) {
  double acc = 0;
  for (const LayerSim* l : layers) {
    const int64_t cap = expert_capacity(B, k, E, F);
    double d = 0;
    for (const auto& per : l->step_counts[bi]) d += static_cast<double>(dropped_for(per, cap)) / (static_cast<double>(B) * k);
    acc += d / static_cast<double>(l->step_counts[bi].size());
  }
  return acc / static_cast<double>(layers.size());
}

// Aggregated rows of one source or group (means over its layers).
struct Agg {
  std::string name, group, detail;
  int E = 0, k = 0;
  int num_layers = 0;
  double real_imb = 0, real_imb_max = 0, sim_imb = 0;
  std::vector<double> bound;
  double bound_f1_mean = 0, bound_f1_worst = 0;
  std::vector<std::vector<double>> drop, moved;  // [batch][factor * P + policy]
  std::vector<double> drop_f1_mean, drop_f1_worst;  // [batch]; -1 without the drop policy
  std::string worst_layer;                          // of the largest batch's drop F
};

Agg aggregate(const std::string& name, const std::string& group, const std::vector<const Source*>& srcs,
              const std::vector<std::vector<LayerSim>>& sims, const CapacityFlags& f, size_t P, int drop_pi) {
  Agg a;
  a.name = name;
  a.group = group;
  a.E = srcs[0]->E;
  a.k = srcs[0]->k;
  const size_t NF = f.factors.size(), NB = f.batch.size();
  a.bound.assign(NF, 0.0);
  a.drop.assign(NB, std::vector<double>(NF * P, 0.0));
  a.moved = a.drop;
  std::vector<const LayerSim*> layers;
  std::vector<std::string> layer_names;
  for (size_t si = 0; si < srcs.size(); ++si) {
    for (size_t l = 0; l < sims[si].size(); ++l) {
      layers.push_back(&sims[si][l]);
      layer_names.push_back((srcs.size() > 1 ? srcs[si]->name + " " : std::string()) + srcs[si]->layer_names[l]);
    }
  }
  const double L = static_cast<double>(layers.size());
  a.num_layers = static_cast<int>(layers.size());
  for (const LayerSim* l : layers) {
    a.real_imb += l->real_imbalance / L;
    a.real_imb_max = std::max(a.real_imb_max, l->real_imbalance);
    a.sim_imb += l->sim_imbalance / L;
    a.bound_f1_worst = std::max(a.bound_f1_worst, l->bound_f1);
    for (size_t fi = 0; fi < NF; ++fi) a.bound[fi] += l->bound[fi] / L;
    for (size_t bi = 0; bi < NB; ++bi) {
      for (size_t j = 0; j < NF * P; ++j) {
        a.drop[bi][j] += l->drop[bi][j] / L;
        a.moved[bi][j] += l->moved[bi][j] / L;
      }
    }
  }
  // F for a mean bound below 1%: the mean of the layers' bounds, by bisection.
  auto mean_bound = [&](double F) {
    double acc = 0;
    for (size_t si = 0; si < srcs.size(); ++si) {
      for (const auto& c : srcs[si]->counts) {
        double total = 0;
        for (double v : c) total += v;
        for (double v : c) acc += std::max(0.0, v / total - F / a.E);
      }
    }
    return acc / L;
  };
  a.bound_f1_mean = factor_for_one_percent(mean_bound, static_cast<double>(a.E));
  a.drop_f1_mean.assign(NB, -1);
  a.drop_f1_worst.assign(NB, -1);
  if (drop_pi >= 0) {
    for (size_t bi = 0; bi < NB; ++bi) {
      const int B = f.batch[bi];
      a.drop_f1_mean[bi] = factor_for_one_percent(
          [&](double F) { return mean_drop_at(layers, bi, B, a.k, a.E, F); }, static_cast<double>(a.E) / a.k);
      for (size_t li = 0; li < layers.size(); ++li) {
        const double v = factor_for_one_percent(
            [&](double F) { return mean_drop_at({layers[li]}, bi, B, a.k, a.E, F); }, static_cast<double>(a.E) / a.k);
        if (v > a.drop_f1_worst[bi]) {
          a.drop_f1_worst[bi] = v;
          if (bi + 1 == NB) a.worst_layer = layer_names[li];
        }
      }
    }
  }
  return a;
}

void print_agg(const Agg& a, const CapacityFlags& f, const std::vector<std::string>& pnames) {
  const size_t NF = f.factors.size(), P = pnames.size();
  std::printf("== %s%s: E=%d k=%d, %d layer%s ==\n", a.name.c_str(), a.detail.c_str(), a.E, a.k, a.num_layers,
              a.num_layers == 1 ? "" : "s");
  std::printf("imbalance max/mean: real %.2f (mean over layers; worst layer %.2f), sampled %.2f (B=%d pooled)\n",
              a.real_imb, a.real_imb_max, a.sim_imb, *std::max_element(f.batch.begin(), f.batch.end()));
  std::printf("  %-18s", "dropped %  F =");
  for (double F : f.factors) std::printf(" %6s", fmt(F, 2).c_str());
  std::printf(" | %8s %8s\n", "F<1%", "worst");
  std::printf("  %-18s", "bound (B=inf)");
  for (size_t fi = 0; fi < NF; ++fi) std::printf(" %6s", fmt(100 * a.bound[fi], 2).c_str());
  std::printf(" | %8s %8s\n", fmt(a.bound_f1_mean, 2).c_str(), fmt(a.bound_f1_worst, 2).c_str());
  for (size_t bi = 0; bi < f.batch.size(); ++bi) {
    for (size_t pi = 0; pi < P; ++pi) {
      const std::string label = pnames[pi] + " B=" + std::to_string(f.batch[bi]);
      std::printf("  %-18s", label.c_str());
      for (size_t fi = 0; fi < NF; ++fi) std::printf(" %6s", fmt(100 * a.drop[bi][fi * P + pi], 2).c_str());
      if (pnames[pi] == "drop") {
        std::printf(" | %8s %8s\n", fmt(a.drop_f1_mean[bi], 2).c_str(), fmt(a.drop_f1_worst[bi], 2).c_str());
      } else {
        std::printf(" | %8s %8s\n", "-", "-");
        const std::string ml = "  moved B=" + std::to_string(f.batch[bi]);
        std::printf("  %-18s", ml.c_str());
        for (size_t fi = 0; fi < NF; ++fi) std::printf(" %6s", fmt(100 * a.moved[bi][fi * P + pi], 2).c_str());
        std::printf(" |\n");
      }
    }
  }
  if (!a.worst_layer.empty() && a.num_layers > 1) {
    std::printf("  worst layer for F<1%% (drop, B=%d): %s\n", f.batch.back(), a.worst_layer.c_str());
  }
  std::printf("\n");
}

json agg_json(const Agg& a, const CapacityFlags& f, const std::vector<std::string>& pnames) {
  json j = {{"name", a.name},         {"group", a.group},           {"num_experts", a.E},
            {"top_k", a.k},           {"layers", a.num_layers},     {"imbalance_real_mean", a.real_imb},
            {"imbalance_real_max", a.real_imb_max},                 {"imbalance_sampled_mean", a.sim_imb},
            {"bound", a.bound},       {"bound_factor_for_1pct", a.bound_f1_mean},
            {"bound_factor_for_1pct_worst_layer", a.bound_f1_worst}};
  json runs = json::array();
  const size_t P = pnames.size(), NF = f.factors.size();
  for (size_t bi = 0; bi < f.batch.size(); ++bi) {
    for (size_t pi = 0; pi < P; ++pi) {
      std::vector<double> d(NF), m(NF);
      for (size_t fi = 0; fi < NF; ++fi) {
        d[fi] = a.drop[bi][fi * P + pi];
        m[fi] = a.moved[bi][fi * P + pi];
      }
      json r = {{"batch", f.batch[bi]}, {"policy", pnames[pi]}, {"dropped_fraction", d}, {"rerouted_fraction", m}};
      if (pnames[pi] == "drop") {
        r["factor_for_1pct"] = a.drop_f1_mean[bi];
        r["factor_for_1pct_worst_layer"] = a.drop_f1_worst[bi];
      }
      runs.push_back(r);
    }
  }
  j["runs"] = runs;
  return j;
}

int run_capacity(const CapacityFlags& f) {
  if (std::string bad = validate(f); !bad.empty()) return fail(bad);
  std::vector<std::string> files = f.files;
  if (files.empty()) {
    if (std::string bad = default_files(&files); !bad.empty()) return fail(bad);
  }
  std::vector<Source> sources;
  for (const std::string& path : files) {
    if (std::string bad = load_file(path, f, &sources); !bad.empty()) return fail(bad);
  }
  if (sources.empty()) return fail("--routing-file: no routing counts found in the given files");
  std::vector<OverflowPolicy> policies;
  int drop_pi = -1;
  for (const std::string& p : f.policies) {
    if (p == "drop" && drop_pi < 0) drop_pi = static_cast<int>(policies.size());
    policies.push_back(parse_overflow_policy(p).value());
  }
  omp_set_num_threads(f.threads);
  const bool json_out = f.format == "json";
  if (!json_out) {
    std::printf(
        "moe bench capacity: dropped assignments vs capacity factor F on real routing counts (%zu source%s, %s)\n"
        "Per expert only totals are known, so steps are simulated: each token of a batch of B draws its expert\n"
        "order by the Gumbel-top-k trick (ascending Exp(1)/w_e), top-k = its routing, the full order = `ranked`;\n"
        "apply_capacity (capacity ceil(B k F / E)) runs on it; mean over %s steps (seed %lld), then over layers.\n"
        "Weights w_e: %s.\n"
        "Rows: bound = the infinite-batch bound sum_e max(0, q_e - F/E) (q_e = e's share of the counts);\n"
        "drop / reroute = dropped %% of B*k assignments; moved = %% rerouted to a lower-ranked expert.\n"
        "F<1%% = smallest F with the mean dropped fraction under 1%% (drop policy, same sampled steps); worst = the\n"
        "same for the worst single layer. imbalance = max/mean per-expert load.\n\n",
        sources.size(), sources.size() == 1 ? "" : "s", f.threads == 1 ? "1 thread" : (std::to_string(f.threads) + " threads").c_str(),
        f.steps > 0 ? std::to_string(f.steps).c_str() : "max(1, 4096/B)", static_cast<long long>(f.seed),
        f.sampler == "share"
            ? "share, w_e = q_e (the plain recipe; its top-k marginals are flatter than the measured k q_e)"
            : "matched, w_e = -log(1 - k q_e), so a token holds e with probability ~ k q_e, the measured marginal");
    std::fflush(stdout);
  }
  std::vector<std::string> pnames = f.policies;
  std::vector<std::vector<LayerSim>> sims(sources.size());
  std::vector<Agg> aggs;
  json jsources = json::array();
  for (size_t si = 0; si < sources.size(); ++si) {
    const Source& s = sources[si];
    std::fprintf(stderr, "\r[%zu/%zu] %-40s", si + 1, sources.size(), s.name.c_str());
    std::fflush(stderr);
    sims[si].resize(s.counts.size());
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t l = 0; l < s.counts.size(); ++l) sims[si][l] = simulate_layer(s, l, f, policies);
    Agg a = aggregate(s.name, s.group, {&s}, {sims[si]}, f, policies.size(), drop_pi);
    std::string detail = " (" + std::filesystem::path(s.file).filename().string();
    if (s.counts.size() <= 4) {
      detail += ", layers";
      for (size_t l = 0; l < s.layer_names.size(); ++l) detail += (l ? "," : " ") + s.layer_names[l].substr(1);
    }
    if (s.skipped > 0) detail += "; " + std::to_string(s.skipped) + " all-zero (dense) layers skipped";
    detail += ")";
    a.detail = detail;
    if (!json_out) {
      std::fprintf(stderr, "\r%60s\r", "");
      print_agg(a, f, pnames);
      std::fflush(stdout);
    }
    jsources.push_back(agg_json(a, f, pnames));
  }
  std::fprintf(stderr, "\r%60s\r", "");
  // Summary: every layer of every source of a group, weighted alike.
  std::vector<std::string> groups;
  for (const Source& s : sources) {
    if (std::find(groups.begin(), groups.end(), s.group) == groups.end()) groups.push_back(s.group);
  }
  json jgroups = json::array();
  if (!json_out) std::printf("==== Summary by model (means over every layer of every source) ====\n\n");
  for (const std::string& g : groups) {
    std::vector<const Source*> srcs;
    std::vector<std::vector<LayerSim>> gs;
    for (size_t si = 0; si < sources.size(); ++si) {
      if (sources[si].group != g) continue;
      if (!srcs.empty() && (sources[si].E != srcs[0]->E || sources[si].k != srcs[0]->k)) continue;
      srcs.push_back(&sources[si]);
      gs.push_back(sims[si]);
    }
    Agg a = aggregate(g, g, srcs, gs, f, policies.size(), drop_pi);
    a.detail = " (" + std::to_string(srcs.size()) + " source" + (srcs.size() == 1 ? "" : "s") + ")";
    if (!json_out) print_agg(a, f, pnames);
    jgroups.push_back(agg_json(a, f, pnames));
  }
  if (json_out) {
    json doc = {{"command", "bench capacity"},
                {"sampler", f.sampler},
                {"batch", f.batch},
                {"capacity_factors", f.factors},
                {"policies", f.policies},
                {"seed", f.seed},
                {"sources", jsources},
                {"groups", jgroups}};
    std::printf("%s\n", doc.dump(2).c_str());
  }
  return 0;
}

}  // namespace

RunFn add_bench_capacity_command(CLI::App& app) {
  auto f = std::make_shared<CapacityFlags>();
  app.add_option("--routing-file", f->files,
                 "Routing counts (repeatable): SGLang logical_count JSON or the OLMoE expert-counts JSON; default: "
                 "/work/shared/data/routing/olmoe_paper_expert_counts.json and "
                 "/work/shared/data/routing/sglang_deepseek_v3_ep_statistics/*.json");
  app.add_option("--batch", f->batch, "Tokens per simulated step (comma list)")->delimiter(',')->capture_default_str();
  app.add_option("--capacity-factor", f->factors, "Capacity factors (comma list)")->delimiter(',')->capture_default_str();
  app.add_option("--overflow", f->policies, "Policies (comma list): drop, reroute")->delimiter(',')->capture_default_str();
  app.add_option("--olmoe-models", f->olmoe_models,
                 "Models of the OLMoE file (comma list): mistral, olmoe, olmoe-sft, olmoe-dpo")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--sampler", f->sampler,
                 "Gumbel-top-k weights: matched (-log(1 - k q_e): top-k marginals match the counts) or share (q_e)")
      ->capture_default_str();
  app.add_option("--steps", f->steps, "Simulated steps per layer and batch size; 0 = max(1, 4096/B)")
      ->capture_default_str();
  app.add_option("--threads", f->threads, "OpenMP threads (layers in parallel)")->capture_default_str();
  app.add_option("--seed", f->seed, "Sampling seed")->capture_default_str();
  app.add_option("--format", f->format, "Output: table or json")->capture_default_str();
  return [f] { return run_capacity(*f); };
}

}  // namespace moe::cli
