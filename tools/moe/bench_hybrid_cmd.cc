// moe bench hybrid: the MoE block under hybrid parallelism (TP inside a node, EP across
// nodes), MixServe's fused RS -> A2A -> AG (MoeBlock::forward_fused, with and without
// its two-micro-batch overlap) against "all-reduce in the node, then all-to-all across
// nodes" (the non-fused hybrid: AR(attention partials), residual, norm, ep_moe_forward
// of all m tokens on every TP rank with its expert shards, AR(partial outputs),
// residual). Both start from this rank's partial attention output and end with the
// updated residual stream; time per call, interleaved, the slowest rank's, median.
//
//   OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np 4
//     moe bench hybrid --tp 2 --ranks-per-node 2 --threads 1
//
// Random bf16 weights, Mixtral-579M-shaped by default (hidden 1024, 8 experts of
// intermediate 2816, top-2); each rank holds its node's experts' 1/tp shards.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench_moe_layer.h"
#include "commands.h"
#include "moe/comm/mpi_communicator.h"
#include "moe/comm/parallel_groups.h"
#include "moe/core/clock.h"
#include "moe/ops/norm.h"
#include "moe/transformer/mlp_blocks.h"

namespace moe::cli {
namespace {

struct HybridFlags {
  std::vector<int> tokens = {16, 64, 256, 1024, 4096};
  std::string router = "mixtral";
  int hidden = 1024;
  int moe_inter = 2816;
  int tp = 2;
  int ranks_per_node = 2;
  int threads = 1;
  int iters = 5;
  int64_t seed = 1;
  std::string format = "table";
};

std::string validate(const HybridFlags& f) {
  if (f.tokens.empty()) return "--tokens needs at least one value";
  for (int t : f.tokens) {
    if (t < 1 || t > (1 << 16)) return "--tokens values must be in [1, 65536] (got " + std::to_string(t) + ")";
  }
  bool known = false;
  for (const std::string& n : router_preset_names()) known = known || n == f.router;
  if (!known) return "--router: unknown router '" + f.router + "' (expected mixtral, qwen2, qwen3 or deepseek)";
  if (f.hidden < 1 || f.hidden > 65536) return "--hidden must be in [1, 65536] (got " + std::to_string(f.hidden) + ")";
  if (f.tp < 2) return "--tp must be >= 2 (got " + std::to_string(f.tp) + "): the comparison is of TP-in-node paths";
  if (f.moe_inter < f.tp || f.moe_inter % f.tp != 0) {
    return "--moe-inter " + std::to_string(f.moe_inter) + " is not divisible by --tp " + std::to_string(f.tp);
  }
  if (f.ranks_per_node < 0) return "--ranks-per-node must be >= 0 (got " + std::to_string(f.ranks_per_node) + ")";
  if (f.threads < 1) return "--threads must be >= 1 (got " + std::to_string(f.threads) + ")";
  if (f.iters < 1) return "--iters must be >= 1 (got " + std::to_string(f.iters) + ")";
  if (f.format != "table" && f.format != "json") return "--format must be table or json (got '" + f.format + "')";
  return "";
}

std::vector<float> random_rows(int64_t n, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& e : v) e = u(rng);
  return v;
}

Status max_over(Communicator* comm, std::vector<double>* v) {
  const size_t R = static_cast<size_t>(comm->size());
  std::vector<double> all(v->size() * R);
  if (v->empty()) return ok_status();
  MOE_RETURN_IF_ERROR(comm->allgather(v->data(), v->size() * sizeof(double), all.data()));
  for (size_t r = 0; r < R; ++r) {
    for (size_t i = 0; i < v->size(); ++i) (*v)[i] = std::max((*v)[i], all[r * v->size() + i]);
  }
  return ok_status();
}

constexpr int kVariants = 3;
const char* const kVariantNames[kVariants] = {"ar_a2a", "fused", "fused_overlap"};

// The three MoE block paths over one rank's buffers.
struct Paths {
  const ModelConfig& config;
  const LayerWeights& layer;
  Communicator* tp;
  MoeBlock* base;         // non-fused: forward() on contexts without overlap
  MoeBlock* fused;        // forward_fused, no overlap
  MoeBlock* fused_ovl;    // forward_fused, two micro-batches
  std::vector<float> x, attn, buf, h, out;

  Status run(int variant, int64_t m) {
    const int64_t H = config.hidden_size;
    const TensorView xv = m > 0 ? TensorView::f32(x.data(), {m, H}) : TensorView();
    const TensorView av = m > 0 ? TensorView::f32(attn.data(), {m, H}) : TensorView();
    if (variant == 1) return fused->forward_fused(0, av, xv);
    if (variant == 2) return fused_ovl->forward_fused(0, av, xv);
    const size_t n = static_cast<size_t>(m * H);
    std::memcpy(buf.data(), attn.data(), n * sizeof(float));
    MOE_RETURN_IF_ERROR(tp->allreduce_sum(buf.data(), n));
    for (size_t i = 0; i < n; ++i) x[i] += buf[i];
    rms_norm(TensorView::f32(x.data(), {m, H}),
             TensorView::f32(layer.post_attention_norm.data(), {H}), static_cast<float>(config.rms_norm_eps),
             TensorView::f32(h.data(), {m, H}));
    MOE_RETURN_IF_ERROR(base->forward(0, TensorView::f32(h.data(), {m, H}), TensorView::f32(out.data(), {m, H})));
    MOE_RETURN_IF_ERROR(tp->allreduce_sum(out.data(), n));
    for (size_t i = 0; i < n; ++i) x[i] += out[i];
    return ok_status();
  }
};

std::string us(double s) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.0f", s * 1e6);
  return b;
}

int run_hybrid(const HybridFlags& f) {
  if (std::string bad = validate(f); !bad.empty()) return fail(bad);
  if (!launched_under_mpi()) {
    return fail("moe bench hybrid runs under mpirun (a TP group per node, EP across nodes), e.g.\n  mpirun -np 4 moe "
                "bench hybrid --tp 2 --ranks-per-node 2");
  }
  MpiOptions mo;
  mo.ranks_per_node = f.ranks_per_node;
  auto comm_or = make_mpi_communicator(mo);
  if (!comm_or.ok()) return fail(comm_or.status().message());
  std::unique_ptr<Communicator> world = std::move(comm_or).value();
  const int rank = world->rank(), W = world->size();
  const bool root = rank == 0;
  auto fail_all = [root](const std::string& m) { return root ? fail(m) : 1; };
  if (W % f.tp != 0 || W / f.tp < 2) {
    return fail_all("--tp " + std::to_string(f.tp) + " must divide the " + std::to_string(W) +
                    " mpirun ranks into >= 2 TP groups (nodes), e.g. mpirun -np " + std::to_string(2 * f.tp));
  }
  auto groups_or = make_parallel_groups(*world, f.tp, W / f.tp);
  if (!groups_or.ok()) return fail_all(groups_or.status().message());
  ParallelGroups groups = std::move(groups_or).value();
  omp_set_num_threads(f.threads);
  const RouterPreset preset = router_preset(f.router);
  const int E = preset.router.num_experts;
  const int ep_rank = groups.ep_rank;
  const ExpertPlacement placement = ExpertPlacement::contiguous(E, groups.ep_size);
  if (root && f.format == "table") std::fprintf(stderr, "building the layer's expert shards...\n");
  // This rank's shards: a layer of width moe_inter / tp (random values: the timing does
  // not depend on which slice), the router identical everywhere (same seed).
  auto bl = make_bench_layer(preset, f.hidden, f.moe_inter / f.tp, static_cast<uint64_t>(f.seed),
                             [&](int e) { return placement.rank_of(e) == ep_rank; });
  bl->layer.post_attention_norm.assign(static_cast<size_t>(f.hidden), 1.0f);
  ModelWeights weights;
  weights.layers = {bl->layer};
  const std::vector<EpContext> ctx = {EpContext{groups.ep, placement, EpOptions{}, 0}};
  std::vector<EpContext> ctx_ovl = ctx;
  ctx_ovl[0].options.overlap = true;
  int max_tokens = 1;
  for (int t : f.tokens) max_tokens = std::max(max_tokens, t);
  MoeBlock base(bl->config, weights, &ctx, KernelOptions{}, max_tokens);
  MoeBlock fused(bl->config, weights, &ctx, KernelOptions{}, max_tokens);
  MoeBlock fused_ovl(bl->config, weights, &ctx_ovl, KernelOptions{}, max_tokens);
  fused.set_tp(groups.tp);
  fused_ovl.set_tp(groups.tp);

  const bool json_out = f.format == "json";
  if (root && !json_out) {
    std::printf(
        "moe bench hybrid: %d ranks = %d nodes (TP groups) x tp %d, %d thread%s per rank; %s router, %d experts "
        "top-%d,\nhidden %d, moe_intermediate %d (%d per TP rank), random bf16 weights, f32 compute\n"
        "Columns: m = tokens per node (replicated in its TP group); the slowest rank's time per MoE block call, "
        "median of\ninterleaved calls (us):\n"
        "  ar_a2a   AR(attn partials) in node -> residual, norm -> ep_moe_forward of all m tokens per TP rank -> "
        "AR -> residual\n"
        "  fused    RS(attn) -> residual, norm, route the shard -> A2A -> AG/experts/RS in node -> A2A -> AG(x)\n"
        "  fused+ov the same with two micro-batches (node-local collectives of one overlap the other's A2A)\n"
        "  ratio    ar_a2a / fused (> 1: fused faster)\n\n",
        W, groups.ep_size, f.tp, f.threads, f.threads == 1 ? "" : "s", preset.name.c_str(), E,
        preset.router.top_k, f.hidden, f.moe_inter, f.moe_inter / f.tp);
    std::printf("%6s | %9s %9s %9s | %7s %7s | %5s\n", "m", "ar_a2a", "fused", "fused+ov", "ratio", "ratio", "iters");
    std::printf("%6s | %9s %9s %9s | %7s %7s | %5s\n", "", "us", "us", "us", "fused", "fused+ov", "");
    std::fflush(stdout);
  }
  nlohmann::json doc = {{"command", "bench hybrid"}, {"ranks", W},          {"tp", f.tp},
                        {"ep", groups.ep_size},     {"threads", f.threads}, {"router", preset.name},
                        {"hidden", f.hidden},       {"moe_intermediate", f.moe_inter},
                        {"time_unit", "us"},        {"rows", nlohmann::json::array()}};
  for (int m : f.tokens) {
    const size_t n = static_cast<size_t>(m) * static_cast<size_t>(f.hidden);
    const std::vector<float> x0 = random_rows(static_cast<int64_t>(n), static_cast<uint64_t>(f.seed) * 31 + ep_rank);
    Paths p{bl->config, weights.layers[0], groups.tp, &base, &fused, &fused_ovl, x0,
            random_rows(static_cast<int64_t>(n), static_cast<uint64_t>(f.seed) * 131 + rank), std::vector<float>(n),
            std::vector<float>(n), std::vector<float>(n)};
    auto timed = [&](int v, double* dt) -> Status {
      std::memcpy(p.x.data(), x0.data(), n * sizeof(float));
      MOE_RETURN_IF_ERROR(world->barrier());
      const double t0 = now_seconds();
      MOE_RETURN_IF_ERROR(p.run(v, m));
      *dt = now_seconds() - t0;
      return ok_status();
    };
    std::vector<double> warm(kVariants);
    Status st;
    for (int v = 0; v < kVariants && st.ok(); ++v) st = timed(v, &warm[static_cast<size_t>(v)]);
    if (st.ok()) st = max_over(world.get(), &warm);
    // Fast cases repeat up to 10x, to ~0.3 s of calls (every rank agrees on the count).
    const double slowest = *std::max_element(warm.begin(), warm.end());
    const int iters = static_cast<int>(std::clamp(0.3 / std::max(slowest * kVariants, 1e-9), 1.0 * f.iters, 10.0 * f.iters));
    std::vector<std::vector<double>> times(kVariants);
    for (int i = 0; i < iters && st.ok(); ++i) {
      if (root && !json_out) std::fprintf(stderr, "\r[m %d] call %d/%d   ", m, i + 1, iters);
      for (int k = 0; k < kVariants && st.ok(); ++k) {  // rotate the order: no variant always first
        const int v = (i + k) % kVariants;
        double dt = 0;
        st = timed(v, &dt);
        times[static_cast<size_t>(v)].push_back(dt);
      }
    }
    for (auto& t : times) {
      if (st.ok()) st = max_over(world.get(), &t);
    }
    if (!st.ok()) {
      std::fprintf(stderr, "error: rank %d: %s\n", rank, st.message().c_str());
      mpi_abort(1);
    }
    double med[kVariants];
    for (int v = 0; v < kVariants; ++v) med[v] = median_of(times[static_cast<size_t>(v)]);
    nlohmann::json row = {{"tokens_per_node", m}, {"iters", iters}};
    for (int v = 0; v < kVariants; ++v) row[std::string(kVariantNames[v]) + "_us"] = med[v] * 1e6;
    row["ratio_fused"] = med[0] / med[1];
    row["ratio_fused_overlap"] = med[0] / med[2];
    doc["rows"].push_back(row);
    if (root && !json_out) {
      std::fprintf(stderr, "\r%40s\r", "");
      std::printf("%6d | %9s %9s %9s | %7.2f %7.2f | %5d\n", m, us(med[0]).c_str(), us(med[1]).c_str(),
                  us(med[2]).c_str(), med[0] / med[1], med[0] / med[2], iters);
      std::fflush(stdout);
    }
  }
  if (root && json_out) std::printf("%s\n", doc.dump(2).c_str());
  return 0;
}

}  // namespace

RunFn add_bench_hybrid_command(CLI::App& app) {
  auto f = std::make_shared<HybridFlags>();
  app.add_option("--tokens", f->tokens, "Tokens per node per MoE block call (comma list)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--router", f->router, "Router preset: mixtral (top-2/8), qwen2, qwen3 or deepseek")
      ->capture_default_str();
  app.add_option("--hidden", f->hidden, "Hidden size")->capture_default_str();
  app.add_option("--moe-inter", f->moe_inter, "Expert intermediate size (split over --tp)")->capture_default_str();
  app.add_option("--tp", f->tp, "TP group size (ranks of one node); EP = ranks / tp")->capture_default_str();
  app.add_option("--ranks-per-node", f->ranks_per_node, "Emulated nodes of K consecutive ranks (0: real nodes)")
      ->capture_default_str();
  app.add_option("--threads", f->threads, "OpenMP threads per rank")->capture_default_str();
  app.add_option("--iters", f->iters, "Minimum timed calls per path and token count (after 1 warm-up)")
      ->capture_default_str();
  app.add_option("--seed", f->seed, "Weights and activations seed")->capture_default_str();
  app.add_option("--format", f->format, "Output: table or json")->capture_default_str();
  return [f] { return run_hybrid(*f); };
}

}  // namespace moe::cli
