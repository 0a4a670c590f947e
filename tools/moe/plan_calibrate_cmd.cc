// moe plan calibrate: measures a hardware profile on the machine it runs on.
//   mpirun -np 4 moe plan calibrate --ranks-per-node 2 --out profile.json
// For each link tier and primitive (allreduce, reduce_scatter, allgather, alltoall, p2p)
// it times the library's Communicator over message sizes and fits alpha and beta
// (planner/calibration_fit.h). Tiers: intra_node = a split per node (every node measures
// at once); inter_node = one rank per node (split by local index: every "NIC" busy at once,
// as in an EP all-to-all). Device: peak FLOP/s from a bf16 GEMM (ops/linear), memory
// bandwidth from the read probe (core/membw.h), capacity = physical memory / ranks per
// node, all measured with every rank running at once (each rank's share of the machine).
// Progress on rank 0's stderr; the profile is written by rank 0 (write_file_atomically).
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "moe/comm/mpi_communicator.h"
#include "moe/core/atomic_file.h"
#include "moe/core/membw.h"
#include "moe/engine.h"
#include "moe/model/config.h"
#include "moe/ops/linear.h"
#include "moe/planner/calibration_fit.h"
#include "moe/planner/hardware_profile.h"
#include "moe/planner/plan.h"
#include "moe/tensor/tensor.h"

namespace moe::cli {
namespace {

using planner::Primitive;

struct CalibrateFlags {
  std::string out = "profile.json";
  std::string name = "calibrated";
  int ranks_per_node = 0;   // 0 = real nodes
  int64_t max_bytes = 16 << 20;
  double comm_timeout = 60;
  bool quick = false;       // fewer sizes and repeats (tests)
  int threads = 1;          // CPU threads per rank for the device probes (as the engine's --threads)
  std::string model;        // fit the efficiencies to this model's prefill and decode ("" = probes only)
  int prompt_tokens = 64, gen_tokens = 16;
  int repeats = 3;  // timed runs per measurement; the median is kept
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Prefill seconds and decode seconds per token of `req`: the medians of f.repeats runs
// (one run's time on shared cores moves with the scheduler). With `world`, every rank
// starts each run together (barrier).
Status timed_generates(const CalibrateFlags& f, Communicator* world, Engine& engine, const GenerateRequest& req,
                       double out[2]) {
  std::vector<double> prefill, decode;
  for (int i = 0; i < f.repeats; ++i) {
    if (world != nullptr) MOE_RETURN_IF_ERROR(world->barrier());
    MOE_ASSIGN_OR_RETURN(GenerateResult res, engine.generate(req));
    prefill.push_back(res.prefill_seconds);
    decode.push_back(res.decode_seconds / static_cast<double>(std::max<size_t>(1, res.output_token_ids.size() - 1)));
  }
  out[0] = median(prefill);
  out[1] = median(decode);
  return ok_status();
}

// Shared cores (hardware_profile.h DeviceSpec::shared_ranks): rank 0 runs the same
// generate alone while the others wait in a barrier; its speedup over the all-at-once
// times (`prefill`, `decode`) is the profile's solo_speedup (>= 1). shared_ranks: every
// rank on emulated nodes (one host), else the ranks on rank 0's node.
Status fit_solo_speedup(const CalibrateFlags& f, Communicator& world, Engine& engine, const GenerateRequest& req,
                        double prefill, double decode, planner::HardwareProfile* p) {
  int shared = world.size();
  if (f.ranks_per_node == 0) {
    shared = 0;
    for (int r = 0; r < world.size(); ++r) shared += world.node_of(r) == world.node_of(0);
  }
  double solo[2] = {prefill, decode};
  if (world.rank() == 0 && shared > 1) MOE_RETURN_IF_ERROR(timed_generates(f, nullptr, engine, req, solo));
  MOE_RETURN_IF_ERROR(world.barrier());
  MOE_RETURN_IF_ERROR(world.broadcast(solo, sizeof solo, 0));
  p->device.shared_ranks = shared;
  p->device.solo_compute_speedup = std::max(1.0, prefill / std::max(solo[0], 1e-9));
  p->device.solo_memory_speedup = std::max(1.0, decode / std::max(solo[1], 1e-9));
  if (world.rank() == 0) {
    std::fprintf(stderr, "calibrate shared cores: %d ranks share them; rank 0 alone: prefill %.1f ms -> %.2fx, decode "
                 "%.1f ms/token -> %.2fx\n", shared, solo[0] * 1e3, p->device.solo_compute_speedup, solo[1] * 1e3,
                 p->device.solo_memory_speedup);
  }
  return ok_status();
}

// compute_efficiency and memory_efficiency from the engine itself: every rank (at once, as
// under EP) runs a single-process prefill of prompt_tokens and gen_tokens decode steps of
// `model`; the efficiencies are the planner's roofline prediction at 1.0 over the measured
// times (prefill is compute-bound, decode memory-bound), clamped to [0.01, 1].
Status fit_efficiencies(const CalibrateFlags& f, Communicator& world, planner::HardwareProfile* p) {
  MOE_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(f.model));
  EngineOptions eo{.model_dir = f.model, .num_threads = f.threads};
  MOE_ASSIGN_OR_RETURN(auto engine, Engine::open(eo));
  GenerateRequest req;
  for (int i = 0; i < f.prompt_tokens; ++i) req.prompt_token_ids.push_back(3 + (i * 7919) % (config.vocab_size - 3));
  req.max_tokens = f.gen_tokens;
  req.sampling.temperature = 0;
  req.ignore_eos = true;
  MOE_RETURN_IF_ERROR(engine->generate(req).status());  // warm-up
  double mine[2];
  MOE_RETURN_IF_ERROR(timed_generates(f, &world, *engine, req, mine));
  std::vector<double> all(2 * static_cast<size_t>(world.size()));
  MOE_RETURN_IF_ERROR(world.allgather(mine, sizeof mine, all.data()));
  double prefill = 0, decode = 0;  // the slowest rank's
  for (int r = 0; r < world.size(); ++r) {
    prefill = std::max(prefill, all[2 * static_cast<size_t>(r)]);
    decode = std::max(decode, all[2 * static_cast<size_t>(r) + 1]);
  }
  planner::HardwareProfile ideal = *p;
  ideal.device.compute_efficiency = ideal.device.memory_efficiency = 1.0;
  planner::Workload w;
  w.batch = 1;
  w.input_len = f.prompt_tokens;
  w.output_len = f.gen_tokens;
  w.activation_bytes = 4;  // the engine's f32 activations and KV cache
  w.kv_bytes = 4;
  const planner::StrategyResult pred = planner::evaluate_strategy(config, ideal, {1, 1}, w, {1, 1, 1, 1, false});
  auto clamp = [](double x) { return std::min(1.0, std::max(0.01, x)); };
  p->device.compute_efficiency = clamp(pred.prefill.total_s / prefill);
  p->device.memory_efficiency = clamp(pred.decode.total_s / decode);
  if (world.rank() == 0) {
    std::fprintf(stderr,
                 "calibrate efficiencies on %s: prefill %.1f ms (roofline %.1f) -> compute %.2f; decode %.1f ms/token "
                 "(roofline %.1f) -> memory %.2f\n",
                 f.model.c_str(), prefill * 1e3, pred.prefill.total_s * 1e3, p->device.compute_efficiency, decode * 1e3,
                 pred.decode.total_s * 1e3, p->device.memory_efficiency);
  }
  return fit_solo_speedup(f, world, *engine, req, prefill, decode, p);
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One timed operation of `p` with `bytes` (cost_model.h's S) on `c`.
Status run_once(Communicator& c, Primitive p, size_t bytes, std::vector<float>& a, std::vector<float>& b) {
  const int n = c.size();
  switch (p) {
    case Primitive::kAllReduce:
      return c.allreduce_sum(a.data(), bytes / 4);
    case Primitive::kReduceScatter:
      return c.reduce_scatter_sum(a.data(), b.data(),
                                  bytes / 4 / static_cast<size_t>(n));
    case Primitive::kAllGather:
      return c.allgather(a.data(), bytes / static_cast<size_t>(n), b.data());
    case Primitive::kAllToAll: {
      std::vector<size_t> blocks(static_cast<size_t>(n), bytes / static_cast<size_t>(n));
      return c.alltoallv(a.data(), blocks, b.data(), blocks);
    }
    case Primitive::kP2p:
      // Ping-pong between ranks 0 and 1 (the caller halves the time); others idle.
      if (c.rank() == 0) {
        MOE_RETURN_IF_ERROR(c.send(a.data(), bytes, 1, 7));
        return c.recv(b.data(), bytes, 1, 8);
      }
      if (c.rank() == 1) {
        MOE_RETURN_IF_ERROR(c.recv(b.data(), bytes, 0, 7));
        return c.send(a.data(), bytes, 0, 8);
      }
      return ok_status();
  }
  return ok_status();
}

// Times `p` over sizes on `c`: per size, each rank's median of f.repeats block means; the
// slowest rank's (allgathered).
StatusOr<planner::AlphaBeta> measure(Communicator& c, Primitive p, const CalibrateFlags& f, const std::string& tier,
                                     bool print) {
  const int n = c.size();
  std::vector<planner::TimedSize> samples;
  const size_t lo = f.quick ? (64u << 10) : (4u << 10);
  const size_t hi = static_cast<size_t>(f.quick ? std::min<int64_t>(f.max_bytes, 1 << 20) : f.max_bytes);
  std::vector<float> a(hi / 2 + 64, 1e-3f), b(hi / 2 + 64, 0.0f);
  for (size_t s = lo; s <= hi; s *= (f.quick ? 4 : 2)) {
    const size_t bytes = std::max<size_t>(s / (4 * n) * 4 * n, 4 * n);  // whole f32 blocks per rank
    const int iters = std::max(f.quick ? 2 : 4, std::min(f.quick ? 5 : 40, static_cast<int>((64u << 20) / bytes)));
    MOE_RETURN_IF_ERROR(run_once(c, p, bytes, a, b));  // warm-up
    std::vector<double> blocks;  // f.repeats blocks of `iters` operations: the median block's mean
    for (int r = 0; r < f.repeats; ++r) {
      MOE_RETURN_IF_ERROR(c.barrier());
      const double t0 = now_s();
      for (int i = 0; i < iters; ++i) MOE_RETURN_IF_ERROR(run_once(c, p, bytes, a, b));
      blocks.push_back((now_s() - t0) / iters);
    }
    double mine = median(blocks);
    if (p == Primitive::kP2p) mine /= 2;  // one way of the round trip
    std::vector<double> all(static_cast<size_t>(n));
    MOE_RETURN_IF_ERROR(c.allgather(&mine, sizeof mine, all.data()));
    samples.push_back({static_cast<double>(bytes), *std::max_element(all.begin(), all.end())});
    if (print) {
      std::fprintf(stderr, "\rcalibrate %s %-14s %9zu B: %8.1f us   ", tier.c_str(), planner::primitive_name(p),
                   bytes, samples.back().seconds * 1e6);
    }
  }
  return planner::fit_alpha_beta(p, p == Primitive::kP2p ? 2 : n, samples);
}

StatusOr<planner::LinkTier> measure_tier(Communicator& c, const CalibrateFlags& f, const std::string& tier,
                                         bool print) {
  planner::LinkTier t;
  for (Primitive p : {Primitive::kAllReduce, Primitive::kReduceScatter, Primitive::kAllGather, Primitive::kAllToAll,
                      Primitive::kP2p}) {
    auto ab = measure(c, p, f, tier, print);
    if (!ab.ok()) return Status(ab.status()).with_context(tier);
    t[p] = *ab;
    if (print) {
      std::fprintf(stderr, "\rcalibrate %s %-14s alpha %.2f us, bandwidth %.2f GB/s              \n", tier.c_str(),
                   planner::primitive_name(p), ab->alpha * 1e6, 1e-9 / ab->beta);
    }
  }
  return t;
}

// bf16 GEMM FLOP/s of this rank (every rank runs it at once).
double measure_gemm_flops(bool quick) {
  const int64_t m = 256, k = 1024, n = 1024;
  Tensor x = Tensor::zeros(DType::kF32, {m, k}), y = Tensor::zeros(DType::kF32, {m, n});
  std::vector<uint16_t> w(static_cast<size_t>(n * k), 0x3c00);  // bf16 ~0.0078
  Weight2D wt;
  wt.data = w.data();
  wt.dtype = DType::kBF16;
  wt.rows = n;
  wt.cols = k;
  linear(x.view(), wt, y.view(), KernelOptions{});
  const int reps = quick ? 2 : 8;
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    const double t0 = now_s();
    linear(x.view(), wt, y.view(), KernelOptions{});
    best = std::max(best, 2.0 * m * k * n / (now_s() - t0));
  }
  return best;
}

int run_calibrate(const CalibrateFlags& f) {
  if (f.repeats < 1) return fail("--repeats must be >= 1 (got " + std::to_string(f.repeats) + ")");
  if (!launched_under_mpi()) return fail("moe plan calibrate runs under mpirun (e.g. mpirun -np 4 moe plan calibrate --ranks-per-node 2)");
  if (f.max_bytes < (64 << 10)) return fail("--max-bytes must be >= 65536");
  if (f.threads < 1) return fail("--threads must be >= 1");
  if (f.prompt_tokens < 1 || f.gen_tokens < 2) return fail("--prompt-tokens must be >= 1 and --gen-tokens >= 2");
  MpiOptions mo;
  mo.ranks_per_node = f.ranks_per_node;
  mo.timeout_seconds = f.comm_timeout;
  auto world_or = make_mpi_communicator(mo);
  if (!world_or.ok()) return fail(world_or.status().message());
  Communicator& world = **world_or;
  const bool root = world.rank() == 0;
  const int nodes = world.num_nodes();
  int local = 0, per_node = 0;
  for (int r = 0; r < world.size(); ++r) {
    if (world.node_of(r) == world.node_of(world.rank()) && r < world.rank()) ++local;
    if (world.node_of(r) == world.node_of(0)) ++per_node;
  }
  if (per_node < 2) return fail("intra_node tier: needs >= 2 ranks per node (--ranks-per-node K >= 2 emulates nodes)");
  if (nodes < 2) return fail("inter_node tier: needs >= 2 nodes (--ranks-per-node K emulates nodes of K ranks)");
  auto intra = world.split(world.node_of(world.rank()), world.rank());
  if (!intra.ok()) return fail("split per node: " + intra.status().message());
  auto inter = world.split(local, world.rank());
  if (!inter.ok()) return fail("split per local index: " + inter.status().message());
  planner::HardwareProfile p;
  p.name = f.name;
  p.devices_per_node = per_node;
  auto ti = measure_tier(**intra, f, "intra_node", root);
  if (!ti.ok()) return fail(ti.status().message());
  auto te = measure_tier(**inter, f, "inter_node", root);
  if (!te.ok()) return fail(te.status().message());
  p.intra_node = *ti;
  p.inter_node = *te;
  if (Status st = world.barrier(); !st.ok()) return fail(st.message());
  if (root) std::fprintf(stderr, "calibrate device: GEMM and memory bandwidth probes (all ranks at once)\n");
  omp_set_num_threads(f.threads);
  double flops = measure_gemm_flops(f.quick);
  const size_t probe = f.quick ? (64u << 20) : (256u << 20);
  double bw = measure_read_bandwidth(probe, f.threads, f.quick ? 2 : 5);
  double mine[2] = {flops, bw}, all[64];
  if (world.size() > 32) return fail("calibrate: at most 32 ranks");
  if (Status st = world.allgather(mine, sizeof mine, all); !st.ok()) return fail(st.message());
  double min_flops = all[0], min_bw = all[1];
  for (int r = 1; r < world.size(); ++r) {
    min_flops = std::min(min_flops, all[2 * r]);
    min_bw = std::min(min_bw, all[2 * r + 1]);
  }
  p.device.peak_flops_bf16 = min_flops;
  p.device.memory_bandwidth = min_bw;
  p.device.memory_capacity =
      static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE)) / per_node;
  if (!f.model.empty()) {
    if (Status st = fit_efficiencies(f, world, &p); !st.ok()) return fail("--model " + f.model + ": " + st.message());
  }
  p.provenance = "moe plan calibrate: " + std::to_string(world.size()) + " ranks, " + std::to_string(nodes) +
                 " nodes of " + std::to_string(per_node) + (f.ranks_per_node > 0 ? " (emulated)" : "") +
                 "; Communicator " + world.backend() + "; alpha/beta least-squares fits (relative error) over " +
                 (f.quick ? "64 KiB..1 MiB" : "4 KiB.." + std::to_string(f.max_bytes) + " B") +
                 "; peak = measured bf16 GEMM (ops/linear), bandwidth = core/membw read probe, per rank" +
                 (f.model.empty() ? std::string()
                                  : "; efficiencies fitted to " + f.model + "'s prefill (" +
                                        std::to_string(f.prompt_tokens) + " tokens) and decode, all ranks at once");
  if (root) {
    if (Status st = write_file_atomically(f.out, planner::hardware_profile_json(p)); !st.ok()) return fail(st.message());
    std::fprintf(stderr, "calibrate: GEMM %.1f GFLOP/s, memory %.1f GB/s per rank; wrote %s\n", min_flops / 1e9,
                 min_bw / 1e9, f.out.c_str());
  }
  return 0;
}

}  // namespace

RunFn add_plan_calibrate_command(CLI::App& app) {
  auto f = std::make_shared<CalibrateFlags>();
  app.add_option("--out", f->out, "Profile file to write")->capture_default_str();
  app.add_option("--name", f->name, "Profile name")->capture_default_str();
  app.add_option("--ranks-per-node", f->ranks_per_node, "Emulated nodes of K consecutive ranks (0 = real nodes)")
      ->capture_default_str();
  app.add_option("--max-bytes", f->max_bytes, "Largest message size")->capture_default_str();
  app.add_option("--comm-timeout", f->comm_timeout, "Seconds before a collective counts as failed")
      ->capture_default_str();
  app.add_option("--threads", f->threads, "CPU threads per rank for the GEMM and bandwidth probes")
      ->capture_default_str();
  app.add_option("--model", f->model,
                 "Also fit compute/memory efficiency to this model's single-process prefill and decode (every rank at once)");
  app.add_option("--prompt-tokens", f->prompt_tokens, "Prompt tokens of that fit")->capture_default_str();
  app.add_option("--gen-tokens", f->gen_tokens, "Decode steps of that fit")->capture_default_str();
  app.add_option("--repeats", f->repeats,
                 "Timed runs of each measurement (a block of collectives per size, a generate); the median is kept")
      ->capture_default_str();
  app.add_flag("--quick", f->quick, "Fewer sizes and iterations (a few seconds; for tests)");
  return [f]() { return run_calibrate(*f); };
}

}  // namespace moe::cli
