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
// fixed seed, then over a source's layers. The sampler is RoutingSimulator
// (moe/stats/routing_simulator.h); SGLang files are read by parse_sglang_logical_count.
//
//   moe bench capacity                                  # every file of --routing-dir
//   moe bench capacity --routing-dir DIR                # default: ../shared/data/routing
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

#include "bench_capacity_sources.h"
#include "commands.h"
#include "moe/core/check.h"
#include "moe/core/text_format.h"
#include "moe/moe/capacity.h"
#include "moe/stats/routing_simulator.h"

namespace moe::cli {
namespace {

using nlohmann::json;

// The routing data shared next to the source tree (not in the repository).
constexpr const char* kDefaultRoutingDir = MOE_SOURCE_DIR "/../shared/data/routing";

struct CapacityFlags {
  std::vector<std::string> files;  // empty: the files of routing_dir
  std::string routing_dir = kDefaultRoutingDir;
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


std::string validate(const CapacityFlags& f) {
  if (f.batch.empty()) return "--batch needs at least one value";
  for (int b : f.batch) {
    if (b < 1 || b > (1 << 20)) return "--batch values must be in [1, 1048576] (got " + std::to_string(b) + ")";
  }
  if (f.factors.empty()) return "--capacity-factor needs at least one value";
  for (double c : f.factors) {
    if (!std::isfinite(c) || c <= 0 || c > 1e6) {
      return "--capacity-factor values must be numbers in (0, 1e6] (got " + format_g(c) + ")";
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
// Simulation.

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
  StatusOr<RoutingSimulator> made =
      RoutingSimulator::create(s.counts[layer], k, parse_routing_sampler(f.sampler).value());
  MOE_CHECK(made.ok());  // the loaders checked the counts and k <= E
  const RoutingSimulator& sim = *made;
  LayerSim r;
  r.real_imbalance = sim.imbalance();
  auto bound_at = [&](double F) { return sim.drop_bound(F); };
  for (double F : f.factors) r.bound.push_back(bound_at(F));
  r.bound_f1 = factor_for_one_percent(bound_at, static_cast<double>(E));

  const size_t P = policies.size(), NF = f.factors.size();
  r.drop.assign(f.batch.size(), std::vector<double>(NF * P, 0.0));
  r.moved = r.drop;
  r.step_counts.resize(f.batch.size());
  SimulatedStep step;
  std::vector<int64_t> pooled;  // the largest batch size's counts, pooled over its steps
  const size_t largest = static_cast<size_t>(std::max_element(f.batch.begin(), f.batch.end()) - f.batch.begin());
  for (size_t bi = 0; bi < f.batch.size(); ++bi) {
    const int B = f.batch[bi];
    const int steps = steps_for(f, B);
    std::vector<int> idx;
    std::vector<float> w(static_cast<size_t>(B) * static_cast<size_t>(k));
    std::vector<int64_t> sum(static_cast<size_t>(E), 0);
    StepRoutingCounts counts;
    for (int st = 0; st < steps; ++st) {
      sim.sample_step(B, routing_step_seed(s.name + "/" + s.layer_names[layer] + "/" + std::to_string(B) + "/" +
                                               std::to_string(st), f.seed),
                      &step);
      const std::vector<int64_t>& per = step.tokens_per_expert;
      for (int e = 0; e < E; ++e) sum[static_cast<size_t>(e)] += per[static_cast<size_t>(e)];
      const double assignments = static_cast<double>(B) * k;
      for (size_t fi = 0; fi < NF; ++fi) {
        for (size_t pi = 0; pi < P; ++pi) {
          idx = step.topk_idx;
          std::fill(w.begin(), w.end(), 1.0f / static_cast<float>(k));
          const CapacityOptions opt{policies[pi], f.factors[fi]};
          const Status status =
              apply_capacity(opt, nullptr, E, {idx.data(), w.data(), B, k, step.ranked.data()}, &counts);
          MOE_CHECK(status.ok());
          if (policies[pi] == OverflowPolicy::kDrop) {
            MOE_CHECK(counts.dropped == dropped_assignments(per, counts.capacity));
          }
          r.drop[bi][fi * P + pi] += static_cast<double>(counts.dropped) / assignments / steps;
          r.moved[bi][fi * P + pi] += static_cast<double>(counts.rerouted) / assignments / steps;
        }
      }
      r.step_counts[bi].push_back(per);
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
    for (const auto& per : l->step_counts[bi]) {
      d += static_cast<double>(dropped_assignments(per, cap)) / (static_cast<double>(B) * k);
    }
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
  for (double F : f.factors) std::printf(" %6s", format_fixed(F, 2).c_str());
  std::printf(" | %8s %8s\n", "F<1%", "worst");
  std::printf("  %-18s", "bound (B=inf)");
  for (size_t fi = 0; fi < NF; ++fi) std::printf(" %6s", format_fixed(100 * a.bound[fi], 2).c_str());
  std::printf(" | %8s %8s\n", format_fixed(a.bound_f1_mean, 2).c_str(), format_fixed(a.bound_f1_worst, 2).c_str());
  for (size_t bi = 0; bi < f.batch.size(); ++bi) {
    for (size_t pi = 0; pi < P; ++pi) {
      const std::string label = pnames[pi] + " B=" + std::to_string(f.batch[bi]);
      std::printf("  %-18s", label.c_str());
      for (size_t fi = 0; fi < NF; ++fi) std::printf(" %6s", format_fixed(100 * a.drop[bi][fi * P + pi], 2).c_str());
      if (pnames[pi] == "drop") {
        std::printf(" | %8s %8s\n", format_fixed(a.drop_f1_mean[bi], 2).c_str(), format_fixed(a.drop_f1_worst[bi], 2).c_str());
      } else {
        std::printf(" | %8s %8s\n", "-", "-");
        const std::string ml = "  moved B=" + std::to_string(f.batch[bi]);
        std::printf("  %-18s", ml.c_str());
        for (size_t fi = 0; fi < NF; ++fi) std::printf(" %6s", format_fixed(100 * a.moved[bi][fi * P + pi], 2).c_str());
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
    if (std::string bad = default_routing_files(f.routing_dir, &files); !bad.empty()) return fail(bad);
  }
  std::vector<Source> sources;
  for (const std::string& path : files) {
    if (std::string bad = load_routing_file(path, f.olmoe_models, &sources); !bad.empty()) return fail(bad);
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
                 "--routing-dir's olmoe_paper_expert_counts.json and sglang_deepseek_v3_ep_statistics/*.json");
  app.add_option("--routing-dir", f->routing_dir,
                 "Folder of the default routing files (used without --routing-file)")
      ->capture_default_str();
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
