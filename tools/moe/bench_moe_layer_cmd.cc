// moe bench moe-layer: time per MoE layer (router, capacity policy, dispatch layout,
// expert FFN with its gather and combine) for 1..4096 tokens, for synthetic layers with
// the routers of Mixtral, Qwen2-MoE, Qwen3-MoE and DeepSeek-V3, single process; under
// mpirun with --ep N, ep_moe_forward's call time and its EpTimings instead.
//
//   moe bench moe-layer --router all --tokens 1,4,16,64,256,1024,4096
//   mpirun -np 2 moe bench moe-layer --ep 2 --router qwen3
//
// The measurements are bench_moe_layer_measure.cc.
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench_moe_layer.h"
#include "commands.h"
#include "moe/comm/mpi_communicator.h"
#include "moe/core/text_format.h"
#include "moe/placement/expert_placement.h"

namespace moe::cli {
namespace {

// A double as the user would write it (%g).
struct MoeLayerFlags {
  std::vector<int> tokens = {1, 4, 16, 64, 256, 1024, 4096};
  std::vector<std::string> routers = {"all"};
  int hidden = 512;
  int moe_inter = 256;
  double capacity_factor = 1.0;
  std::string overflow = "dropless";
  int threads = 1;
  int iters = 5;
  int ep = 1;
  int64_t seed = 1;
  std::string format = "table";
};

// The first bad flag, or "" when all are fine.
std::string validate(const MoeLayerFlags& f) {
  if (f.tokens.empty()) return "--tokens needs at least one value";
  for (int t : f.tokens) {
    if (t < 1) return "--tokens values must be >= 1 (got " + std::to_string(t) + ")";
    if (t > (1 << 20)) return "--tokens values must be <= 1048576 (got " + std::to_string(t) + ")";
  }
  if (f.routers.empty()) return "--router needs at least one value";
  for (const std::string& r : f.routers) {
    bool known = r == "all";
    for (const std::string& n : router_preset_names()) known = known || r == n;
    if (!known) return "--router: unknown router '" + r + "' (expected mixtral, qwen2, qwen3, deepseek or all)";
  }
  if (f.hidden < 1 || f.hidden > 65536) return "--hidden must be in [1, 65536] (got " + std::to_string(f.hidden) + ")";
  if (f.moe_inter < 1 || f.moe_inter > 65536) {
    return "--moe-inter must be in [1, 65536] (got " + std::to_string(f.moe_inter) + ")";
  }
  // The upper bound keeps expert_capacity's double -> int64 conversion in range; any
  // factor >= num_experts / top_k already admits every assignment.
  if (!std::isfinite(f.capacity_factor) || f.capacity_factor <= 0 || f.capacity_factor > 1e6) {
    return "--capacity-factor must be a number in (0, 1e6] (got " + format_g(f.capacity_factor) + ")";
  }
  if (auto p = parse_overflow_policy(f.overflow); !p.ok()) return "--overflow: " + p.status().message();
  if (f.threads < 1) return "--threads must be >= 1 (got " + std::to_string(f.threads) + ")";
  if (f.iters < 1) return "--iters must be >= 1 (got " + std::to_string(f.iters) + ")";
  if (f.ep < 1) return "--ep must be >= 1 (got " + std::to_string(f.ep) + ")";
  if (f.format != "table" && f.format != "json") return "--format must be table or json (got '" + f.format + "')";
  return "";
}

std::vector<std::string> expand_routers(const std::vector<std::string>& given) {
  std::vector<std::string> out;
  auto add = [&out](const std::string& n) {
    for (const std::string& o : out) {
      if (o == n) return;
    }
    out.push_back(n);
  };
  for (const std::string& r : given) {
    if (r == "all") {
      for (const std::string& n : router_preset_names()) add(n);
    } else {
      add(r);
    }
  }
  return out;
}

std::vector<float> random_activations(int tokens, int hidden, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(tokens) * static_cast<size_t>(hidden));
  for (float& v : x) v = u(rng);
  return x;
}

// Microseconds, 3 significant digits-ish.
std::string us(double seconds) {
  const double u = seconds * 1e6;
  char buf[32];
  if (u < 10) {
    std::snprintf(buf, sizeof(buf), "%.2f", u);
  } else if (u < 100) {
    std::snprintf(buf, sizeof(buf), "%.1f", u);
  } else {
    std::snprintf(buf, sizeof(buf), "%.0f", u);
  }
  return buf;
}

void print_header(const MoeLayerFlags& f, const CapacityOptions& cap, int ranks) {
  const std::string policy = cap.policy == OverflowPolicy::kDropless
                                 ? "dropless"
                                 : std::string(overflow_policy_name(cap.policy)) + ", capacity factor " +
                                       format_g(cap.capacity_factor);
  std::printf("moe bench moe-layer: %s, %d thread%s%s, hidden %d, moe_intermediate %d (defaults sized for a 2-core\n"
              "machine; real models use hidden 2048-7168), random bf16 weights (f32 compute), random activations,\n"
              "overflow policy %s\n",
              ranks > 1 ? ("expert parallel over " + std::to_string(ranks) + " ranks (contiguous placement)").c_str()
                        : "single process",
              f.threads, f.threads == 1 ? "" : "s", ranks > 1 ? " per rank" : "", f.hidden, f.moe_inter,
              policy.c_str());
  if (ranks > 1) {
    std::printf(
        "Columns (us = microseconds; median over >= %d timed calls after 1 warm-up, fast cases repeat to ~0.2 s;\n"
        "each rank routes its own tokens):\n"
        "  call      the slowest rank's whole ep_moe_forward (router, capacity over the group, layout, dispatch,\n"
        "            experts, combine)\n"
        "  compute   the slowest rank's EpTimings.compute_seconds (expert FFN)\n"
        "  wait      the slowest rank's EpTimings.comm_wait_seconds (blocked on the exchanges)\n"
        "  tok/s     tokens over all ranks / call\n\n",
        f.iters);
    return;
  }
  std::printf(
      "Columns (us = microseconds; median over >= %d timed iterations after 1 warm-up, fast cases repeat to ~0.2 s):\n"
      "  logits    router logits GEMM, [tokens x hidden] x [hidden x experts] (linear)\n"
      "  topk      route_topk: scores, group limit, top-k, weights (+ the full selection order under reroute)\n"
      "  capacity  apply_capacity (single process; only counts under dropless)\n"
      "  ffn       grouped_expert_ffn as a whole: group_by_expert + gather + expert GEMMs + weighted scatter-add\n"
      "            (dispatch, experts and combine are not timed apart: that would duplicate its internals)\n"
      "  layout    group_by_expert alone: the dispatch layout (also counted inside ffn)\n"
      "  move      grouped_expert_ffn on the same routing with 1-wide experts: ~ layout + gather + combine, the\n"
      "            data movement around the GEMMs (ffn - move ~ the expert GEMMs)\n"
      "  total     logits + topk + capacity + ffn, timed as one span;  tok/s = tokens / total\n"
      "  router%%   (logits + topk) / total;  drop%% = dropped assignments / (tokens x top_k)\n\n",
      f.iters);
}

int run_moe_layer(const MoeLayerFlags& f) {
  if (std::string bad = validate(f); !bad.empty()) return fail(bad);
  const CapacityOptions cap{parse_overflow_policy(f.overflow).value(), f.capacity_factor};
  const bool mpi = launched_under_mpi();
  std::unique_ptr<Communicator> comm;
  int rank = 0, ranks = 1;
  if (mpi) {
    auto comm_or = make_mpi_communicator(MpiOptions{});
    if (!comm_or.ok()) return fail(comm_or.status().message());
    comm = std::move(comm_or).value();
    rank = comm->rank();
    ranks = comm->size();
  }
  const bool root = rank == 0;
  // Every rank sees the same flags, so every rank fails alike; rank 0 prints.
  auto fail_all = [root](const std::string& m) { return root ? fail(m) : 1; };
  if (!mpi && f.ep > 1) {
    return fail("--ep " + std::to_string(f.ep) + " runs expert parallelism: start it as mpirun -np " +
                std::to_string(f.ep) + " moe bench moe-layer --ep " + std::to_string(f.ep));
  }
  if (mpi && f.ep != ranks) {
    return fail_all("--ep " + std::to_string(f.ep) + " must equal the number of mpirun ranks (" +
                    std::to_string(ranks) + ")");
  }
  const bool ep = ranks > 1;
  omp_set_num_threads(f.threads);
  const bool json_out = f.format == "json";
  if (root && !json_out) print_header(f, cap, ranks);
  nlohmann::json doc = {{"command", "bench moe-layer"},
                        {"mode", ep ? "ep" : "single"},
                        {"ranks", ranks},
                        {"threads", f.threads},
                        {"hidden", f.hidden},
                        {"moe_intermediate", f.moe_inter},
                        {"overflow", overflow_policy_name(cap.policy)},
                        {"capacity_factor", f.capacity_factor},
                        {"time_unit", "us"},
                        {"routers", nlohmann::json::array()}};
  int max_tokens = 0;
  for (int t : f.tokens) max_tokens = std::max(max_tokens, t);
  const std::vector<float> x =
      random_activations(max_tokens, f.hidden, static_cast<uint64_t>(f.seed) * 7919u + static_cast<uint64_t>(rank));

  const std::vector<std::string> routers = expand_routers(f.routers);
  for (size_t ri = 0; ri < routers.size(); ++ri) {
    const RouterPreset preset = router_preset(routers[ri]);
    const int E = preset.router.num_experts;
    const uint64_t seed = static_cast<uint64_t>(f.seed) * 1000003u + ri;
    if (root) std::fprintf(stderr, "\r[%s] building %d experts...          ", preset.name.c_str(), E);
    const ExpertPlacement placement = ExpertPlacement::contiguous(E, ranks);
    std::function<bool(int)> local = nullptr;
    if (ep) local = [&placement, rank](int e) { return placement.rank_of(e) == rank; };
    // Same router weights on every rank (same seed); expert values differ with the placement.
    auto layer = make_bench_layer(preset, f.hidden, f.moe_inter, seed, local);
    std::unique_ptr<BenchLayer> move;
    if (!ep) move = make_bench_layer(preset, f.hidden, 1, seed + 17u);
    nlohmann::json rj = {{"router", preset.name},
                         {"description", preset.label},
                         {"num_experts", E},
                         {"top_k", preset.router.top_k},
                         {"rows", nlohmann::json::array()}};
    if (root && !json_out) {
      std::printf("== %s: %s ==\n", preset.name.c_str(), preset.label.c_str());
      if (ep) {
        std::printf("%8s | %9s %9s %9s | %10s %6s\n", "tokens", "call", "compute", "wait", "tok/s", "drop%");
        std::printf("%8s | %9s %9s %9s | %10s %6s\n", "per rank", "us", "us", "us", "all ranks", "");
      } else {
        std::printf("%7s | %8s %8s %8s | %8s %8s %8s | %9s %9s | %7s %6s\n", "tokens", "logits", "topk", "capacity",
                    "ffn", "layout", "move", "total", "tok/s", "router%", "drop%");
      }
      std::fflush(stdout);
    }
    for (int tokens : f.tokens) {
      if (root) std::fprintf(stderr, "\r[%s] %d tokens...                  ", preset.name.c_str(), tokens);
      if (ep) {
        EpStageTimes t;
        if (Status st = time_ep_layer(*layer, comm.get(), placement, x, tokens, cap, f.iters, &t); !st.ok()) {
          std::fprintf(stderr, "error: rank %d: ep_moe_forward: %s\n", rank, st.message().c_str());
          mpi_abort(1);
        }
        const double tps = static_cast<double>(tokens) * ranks / t.call;
        rj["rows"].push_back({{"tokens_per_rank", tokens},
                              {"call_us", t.call * 1e6},
                              {"compute_us", t.compute * 1e6},
                              {"comm_wait_us", t.wait * 1e6},
                              {"tokens_per_s", tps},
                              {"dropped_fraction", t.dropped},
                              {"iters", t.iters}});
        if (root && !json_out) {
          std::fprintf(stderr, "\r%60s\r", "");
          std::printf("%8d | %9s %9s %9s | %10.0f %6.2f\n", tokens, us(t.call).c_str(), us(t.compute).c_str(),
                      us(t.wait).c_str(), tps, 100.0 * t.dropped);
          std::fflush(stdout);
        }
        continue;
      }
      const StageTimes t = time_single_layer(*layer, *move, x, tokens, cap, f.iters);
      const double tps = tokens / t.total;
      rj["rows"].push_back({{"tokens", tokens},
                            {"logits_us", t.logits * 1e6},
                            {"topk_us", t.topk * 1e6},
                            {"router_us", (t.logits + t.topk) * 1e6},
                            {"capacity_us", t.capacity * 1e6},
                            {"ffn_us", t.ffn * 1e6},
                            {"layout_us", t.layout * 1e6},
                            {"move_us", t.ffn_move * 1e6},
                            {"total_us", t.total * 1e6},
                            {"tokens_per_s", tps},
                            {"dropped_fraction", t.dropped},
                            {"rerouted_fraction", t.rerouted},
                            {"iters", t.iters}});
      if (!json_out) {
        std::fprintf(stderr, "\r%60s\r", "");
        std::printf("%7d | %8s %8s %8s | %8s %8s %8s | %9s %9.0f | %6.1f%% %6.2f\n", tokens, us(t.logits).c_str(),
                    us(t.topk).c_str(), us(t.capacity).c_str(), us(t.ffn).c_str(), us(t.layout).c_str(),
                    us(t.ffn_move).c_str(), us(t.total).c_str(), tps, 100.0 * (t.logits + t.topk) / t.total,
                    100.0 * t.dropped);
        std::fflush(stdout);
      }
    }
    if (root && !json_out) std::printf("\n");
    doc["routers"].push_back(rj);
  }
  if (root) std::fprintf(stderr, "\r%60s\r", "");
  if (root && json_out) std::printf("%s\n", doc.dump(2).c_str());
  return 0;
}

}  // namespace

RunFn add_bench_moe_layer_command(CLI::App& app) {
  auto f = std::make_shared<MoeLayerFlags>();
  app.add_option("--tokens", f->tokens, "Token counts per layer call (comma list)")->delimiter(',')->capture_default_str();
  app.add_option("--router", f->routers,
                 "Routers (comma list): mixtral (softmax top-2/8), qwen2 (softmax top-4/60, not renormalised), qwen3 "
                 "(softmax top-8/128), deepseek (sigmoid noaux_tc top-8/256, 8 groups keep 4, x2.5), or all")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--hidden", f->hidden, "Hidden size (small default: this is a 2-core machine)")->capture_default_str();
  app.add_option("--moe-inter", f->moe_inter, "Expert intermediate size")->capture_default_str();
  app.add_option("--capacity-factor", f->capacity_factor, "Expert capacity factor (drop and reroute policies)")
      ->capture_default_str();
  app.add_option("--overflow", f->overflow, "Overflow policy: dropless, drop or reroute")->capture_default_str();
  app.add_option("--threads", f->threads, "OpenMP threads (per rank under mpirun)")->capture_default_str();
  app.add_option("--iters", f->iters, "Minimum timed iterations per token count (after 1 warm-up)")
      ->capture_default_str();
  app.add_option("--ep", f->ep, "Expert parallelism over N ranks: run under mpirun -np N")->capture_default_str();
  app.add_option("--seed", f->seed, "Weights and activations seed")->capture_default_str();
  app.add_option("--format", f->format, "Output: table or json")->capture_default_str();
  return [f] { return run_moe_layer(*f); };
}

}  // namespace moe::cli
