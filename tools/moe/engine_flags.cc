#include "engine_flags.h"

#include <algorithm>
#include <cmath>

#include <cstdio>
#include <thread>
#include <tuple>

#include "commands.h"
#include "config_apply.h"
#include "moe/comm/mpi_communicator.h"
#include "moe/core/text_format.h"

namespace moe::cli {

void add_engine_flags(CLI::App& app, EngineFlags* f, bool batch_invariant_default) {
  f->options.batch_invariant = batch_invariant_default;
  app.add_option("--model", f->options.model_dir, "Model: a Hugging Face directory or a checkpoint store (moe ckpt convert); default: the shipped tiny-mixtral-shakespeare");
  app.add_option("--threads", f->options.num_threads, "CPU threads; 0 = all cores")->capture_default_str();
  f->ep_option = app.add_option("--ep", f->launch.ep,
                                "Expert-parallel ranks (run under mpirun -np N; with --tp K: mpirun -np K*N, "
                                "default N = ranks / K)")
                     ->capture_default_str();
  app.add_option("--tp", f->launch.tp,
                 "Tensor-parallel ranks per group: heads, MLP and expert intermediate dims and the vocabulary "
                 "split over K consecutive ranks of one node (with --ep N: hybrid, TP in the node, EP across "
                 "nodes; mpirun -np K*N)")
      ->capture_default_str();
  app.add_option("--fused-moe", f->fused_moe,
                 "on|off: hybrid (--tp K --ep N, both > 1): MoE layers as MixServe's fused reduce-scatter -> "
                 "all-to-all -> all-gather (on), or an all-reduce then the all-to-all (off)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  // DP-attention: one attention replica per TP group, EP MoE across them.
  app.add_option("--dp-attention", f->dp_attention,
                 "on|off: each TP group (one per node; each rank without --tp) runs attention for its own share "
                 "of the batch's sequences, with their KV cache; MoE stays expert-parallel across the groups "
                 "(needs --ep > 1 under mpirun; off: the driver's group runs attention for all)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  app.add_option("--ranks-per-node", f->launch.ranks_per_node,
                 "Emulate nodes of K consecutive ranks (0 = real nodes from MPI)")->capture_default_str();
  f->comm_timeout_option =
      app.add_option("--comm-timeout", f->launch.comm_timeout_seconds,
                     "Seconds an expert-parallel rank waits for a peer before declaring it failed (mpi: the "
                     "requests in flight end with an error and every rank exits; gloo: the others fail over); "
                     "EP only")
          ->capture_default_str();
  app.add_option("--comm-backend", f->launch.comm_backend,
                 "EP transport: mpi, or gloo (survives a dead rank: the others fail over to replicas without a "
                 "restart; run under mpirun --enable-recovery)")
      ->check(CLI::IsMember({"mpi", "gloo"}))
      ->capture_default_str();
  f->failover_wait_option =
      app.add_option("--failover-wait", f->options.failover_wait_seconds,
                     "--comm-backend gloo: seconds the survivors of a failed rank wait for its lost experts to be "
                     "re-loaded before serving with their tokens rerouted (degraded); 0 = at once")
          ->capture_default_str();
  f->failover_join_option =
      app.add_option("--failover-join", f->options.failover_join_seconds,
                     "--comm-backend gloo: seconds the survivors of a failed rank have to check in when the group "
                     "re-forms; a survivor later than that is left out with the failed rank (> 0)")
          ->capture_default_str();
  app.add_option("--gloo-store", f->launch.gloo_store_dir,
                 "--comm-backend gloo: rendezvous directory all ranks share (default /tmp/moe-gloo-<mpirun job id>)");
  f->gloo_host_option = app.add_option("--gloo-host", f->launch.gloo_host,
                                       "--comm-backend gloo: the address this rank listens on for its peers")
                            ->capture_default_str();
  // EP overlap: micro-batches pipelined against the all-to-all.
  app.add_flag("--ep-overlap", f->options.ep_overlap,
               "Overlap the all-to-all with expert compute (pipelined micro-batches; flat and hierarchical exchange)");
  app.add_option("--ep-micro-batches", f->options.ep_micro_batches,
                 "With --ep-overlap: micro-batches per MoE layer call, 2..8 (0 = auto, about 64 tokens each)")
      ->capture_default_str();
  // KV cache dtype (EngineOptions::kv_dtype).
  app.add_option("--kv-dtype", f->options.kv_dtype,
                 "KV cache element type: f32, or bf16 / f16 (half the bytes per cached token; GQA models only)")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}))
      ->capture_default_str();
  app.add_option("--a2a-dtype", f->a2a_dtype, "Dispatch/combine activation dtype: f32 (exact) or bf16 (half the bytes)")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  app.add_option("--a2a-mode", f->a2a_mode,
                 "flat, hierarchical (inter-node then intra-node), or auto (hierarchical when ranks span nodes)")
      ->check(CLI::IsMember({"auto", "flat", "hierarchical"}))
      ->capture_default_str();
  app.add_option("--max-nodes-per-token", f->options.max_nodes_per_token,
                 "Node-limited routing: experts of each token on at most M nodes (0 = off)")
      ->capture_default_str();
  f->capacity_option = app.add_option("--capacity-factor", f->capacity_factor,
                                      "Expert capacity: ceil(tokens * top_k * F / experts) per expert and step "
                                      "(implies --overflow-policy drop unless given)");
  app.add_option("--overflow-policy", f->options.overflow_policy,
                 "What happens past capacity: dropless (no capacity; default), drop, reroute "
                 "(to the token's next-best expert with room), or adaptive_requeue (a second round on the same "
                 "expert within the room other experts left unused)")
      ->check(CLI::IsMember({"dropless", "drop", "reroute", "adaptive_requeue"}));
  // Adaptive top-k (src/moe/moe/adaptive_k.h has the exact rule).
  app.add_flag("--adaptive-k", f->options.adaptive_k,
               "Adaptive top-k: when an expert's step load exceeds the target (--adaptive-k-target), tokens "
               "drop their lower-ranked experts with the smallest weights, never below --min-k");
  f->min_k_option = app.add_option("--min-k", f->options.min_k,
                                   "--adaptive-k: experts per token never shed (default 1)");
  f->max_k_option = app.add_option("--max-k", f->options.max_k,
                                   "--adaptive-k: experts per token at most (default: the model's top-k)");
  f->adaptive_k_target_option =
      app.add_option("--adaptive-k-target", f->adaptive_k_target,
                     "--adaptive-k: load target F, ceil(tokens * max_k * F / experts) assignments per expert and "
                     "step (default: --capacity-factor, else 1.0)");
  app.add_option("--stats-ema-decay", f->options.stats_ema_decay, "Decay of the per-step load EMA in the load statistics")
      ->capture_default_str();
  app.add_option("--placement", f->options.placement_file,
                 "Static expert placement plan (moe placement plan output) for EP ranks");
  app.add_option("--rebalance-every", f->options.rebalance_every,
                 "Re-plan the expert placement from the load statistics every N decode steps (0 = never; EP only)")
      ->capture_default_str();
  app.add_option("--slots-per-rank", f->options.slots_per_rank,
                 "Expert slots per rank when rebalancing (spare slots hold replicas of hot experts); "
                 "0 = ceil(experts / ranks)")
      ->capture_default_str();
  app.add_option("--replica-cap", f->options.replica_cap, "Most replicas of one expert when rebalancing")->capture_default_str();
  app.add_option("--min-replicas", f->options.min_replicas,
                 "Every expert on at least K EP ranks, so any K-1 ranks can fail (start-up placement and "
                 "rebalancing keep it; a --placement file with fewer is refused; EP only)")
      ->capture_default_str();
  app.add_option("--rebalance-min-gain", f->options.rebalance_min_gain,
                 "Adopt a new plan only if it lowers the predicted max rank load by this fraction")
      ->capture_default_str();
  app.add_option("--batch-invariant", f->options.batch_invariant,
                 "true|false: batch-invariant kernels (a token's logits do not depend on what shares its batch; "
                 "GEMV instead of sgemm for prefill)")
      ->capture_default_str();
  app.add_option("--mla-attention", f->options.mla_attention,
                 "DeepSeek MLA models: naive (expand K/V from the latent cache), absorbed (attend in the latent "
                 "space) or auto (naive for prefill, absorbed for decode; absorbed under --batch-invariant)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "naive", "absorbed"}));
  app.add_option("--fp8", f->fp8,
                 "dequant|native: FP8 weights (quantization_config) dequantised to bf16 once at load (faster "
                 "GEMV in `moe bench fp8`), or kept in FP8 and dequantised in the kernels (half the memory and "
                 "bytes per decode token)")
      ->capture_default_str();
  // YAML config: --config FILE.yaml; its values reach the flags above in main().
  add_config_flag(app, &f->config_file);
  // --- Per-step traces: docs/tracing.md ---
  app.add_option("--trace", f->options.trace_path,
                 "Write a per-step trace (Chrome trace-event JSON, open in https://ui.perfetto.dev): spans per rank "
                 "(attention, router, dispatch, expert compute, combine, waits) and bytes per rank pair; gathered to "
                 "rank 0 at the end. Summarize with `moe trace summarize FILE`");
  app.add_option("--trace-max-events", f->options.trace_max_events,
                 "Events kept per rank with --trace (40 bytes each, allocated at start; later ones are dropped and "
                 "counted in the file)")
      ->capture_default_str();
  // --- end per-step traces ---
  // Hardening: the NaN/Inf scan of the weights at load.
  app.add_flag("--skip-weight-check", f->skip_weight_check,
               "Do not scan the loaded weights for NaN/Inf at start-up (a corrupt checkpoint is then served)");
  // Kernels and weight formats: src/moe/ops/kernel_isa.h,
  // src/moe/model/int8_quant.h. Checked by Engine::open (a path the CPU lacks is refused).
  app.add_option("--kernels", f->options.kernels,
                 "Linear kernels' instruction set: auto (the best this CPU has), avx2, avx512 or avx512-bf16 "
                 "(vdpbf16ps for bf16 weights)")
      ->check(CLI::IsMember({"auto", "avx2", "avx512", "avx512-bf16"}))
      ->capture_default_str();
  app.add_option("--weights", f->options.weights,
                 "Weight format in memory: native (as stored) or int8 (projections quantised at load, a scale per 32 "
                 "weights like q8_0: about half the bytes per decode token of bf16)")
      ->check(CLI::IsMember({"native", "int8"}))
      ->capture_default_str();
  app.add_option("--hugepages", f->options.hugepages,
                 "auto, on or off: copy the weights this process decodes with into transparent huge pages (2 MiB), "
                 "which decode reads ~1.5x faster than the mapped files' 4 KiB pages; off keeps them in the mapped "
                 "files (shared page cache between ranks on a host); auto: on when the kernel offers huge pages and "
                 "the model is a Hugging Face directory (not an expert store) of at least 64 MiB of weights")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  app.add_option("--matmul-precision", f->options.matmul_precision,
                 "Prefill matmuls on bf16 weights: highest (activations in f32, sgemm) or medium (activations "
                 "rounded to bf16, oneDNN's AVX-512 BF16 matmul: about 2x faster prefill, ~2^-9 relative error per "
                 "activation, as llama.cpp's bf16 matmul and torch.set_float32_matmul_precision('medium')); needs "
                 "--kernels avx512-bf16 (auto on such a CPU), --batch-invariant false and bf16 weights")
      ->check(CLI::IsMember({"highest", "medium"}))
      ->capture_default_str();
}

std::string check_engine_flags(const EngineFlags& f) {
  const EngineOptions& o = f.options;
  if (o.trace_max_events < 1) {  // per-step traces (--trace)
    return "--trace-max-events must be >= 1 (got " + std::to_string(o.trace_max_events) + ")";
  }
  if (f.fp8 != "native" && f.fp8 != "dequant") return "--fp8 must be native or dequant (got '" + f.fp8 + "')";
  if (o.num_threads < 0) return "--threads must be >= 0 (got " + std::to_string(o.num_threads) + ")";
  // Far past the machine's hardware threads only slows the kernels, and the OpenMP
  // runtime's per-thread stacks run out (100000 crashed in ops/linear).
  const unsigned hw = std::thread::hardware_concurrency();
  const int max_threads = 4 * static_cast<int>(hw > 0 ? hw : 64);
  if (o.num_threads > max_threads) {
    return "--threads " + std::to_string(o.num_threads) + " is more than 4 x this machine's " +
           std::to_string(max_threads / 4) + " hardware threads (" + std::to_string(max_threads) +
           "); 0 = all cores";
  }
  if (std::string why = comm_backend_unbuilt_reason(f.launch.comm_backend); !why.empty()) return why;
  if (f.launch.ep < 1) return "--ep must be >= 1 (got " + std::to_string(f.launch.ep) + ")";
  if (f.launch.tp < 1) return "--tp must be >= 1 (got " + std::to_string(f.launch.tp) + ")";
  if (f.fused_moe != "on" && f.fused_moe != "off") return "--fused-moe must be on or off (got '" + f.fused_moe + "')";
  if (f.dp_attention != "on" && f.dp_attention != "off") {
    return "--dp-attention must be on or off (got '" + f.dp_attention + "')";
  }
  if (f.dp_attention == "on") {  // DP-attention: what it cannot do, before loading (the engine checks too)
    if (f.launch.comm_backend == "gloo") {
      return "--dp-attention on with --comm-backend gloo: failover cannot re-form the DP-attention groups; use "
             "--comm-backend mpi";
    }
    if (o.rebalance_every > 0) return "--rebalance-every is not supported with --dp-attention on";
  }
  if (f.launch.tp > 1) {
    // What would silently diverge across a TP group's ranks (or cannot re-form) is refused.
    const std::string tp = "--tp " + std::to_string(f.launch.tp);
    if (f.launch.comm_backend == "gloo") {
      return tp + " with --comm-backend gloo: failover cannot re-form tensor-parallel groups; use --comm-backend mpi";
    }
    if (o.rebalance_every > 0) return "--rebalance-every is not supported with " + tp + " (experts are TP-sharded)";
    if (o.min_replicas > 1) return "--min-replicas > 1 is not supported with " + tp + " (experts are TP-sharded)";
    if (!o.placement_file.empty()) return "--placement is not supported with " + tp + " (contiguous placement only)";
  }
  if (o.max_nodes_per_token < 0) {
    return "--max-nodes-per-token must be >= 0 (got " + std::to_string(o.max_nodes_per_token) + ")";
  }
  if (!(f.launch.comm_timeout_seconds > 0 && std::isfinite(f.launch.comm_timeout_seconds))) {
    return "--comm-timeout must be a finite number of seconds > 0 (got " + format_g(f.launch.comm_timeout_seconds) + ")";
  }
  if (f.comm_timeout_given() && f.world_size() == 1 && !launched_under_mpi()) {
    return "--comm-timeout applies to expert parallelism (--ep > 1) or tensor parallelism (--tp > 1)";
  }
  if (f.launch.comm_backend == "gloo" && !launched_under_mpi()) {
    return "--comm-backend gloo: run under mpirun --enable-recovery with --ep N";
  }
  if ((!f.launch.gloo_store_dir.empty() || f.gloo_host_given()) && f.launch.comm_backend != "gloo") {
    return std::string(f.launch.gloo_store_dir.empty() ? "--gloo-host" : "--gloo-store") +
           " applies to --comm-backend gloo";
  }
  if (!(f.options.failover_wait_seconds >= 0 && std::isfinite(f.options.failover_wait_seconds))) {
    return "--failover-wait must be a finite number of seconds >= 0 (got " + format_g(f.options.failover_wait_seconds) + ")";
  }
  if (f.failover_wait_given() && f.launch.comm_backend != "gloo") {
    return "--failover-wait applies to --comm-backend gloo (failover without a restart)";
  }
  if (!(f.options.failover_join_seconds > 0 && std::isfinite(f.options.failover_join_seconds))) {
    return "--failover-join must be a finite number of seconds > 0 (got " + format_g(f.options.failover_join_seconds) + ")";
  }
  if (f.failover_join_given() && f.launch.comm_backend != "gloo") {
    return "--failover-join applies to --comm-backend gloo (failover without a restart)";
  }
  if (f.launch.comm_backend == "gloo" && f.options.ep_overlap) {
    return "--ep-overlap needs nonblocking all-to-all, which the gloo backend does not offer; use --comm-backend mpi";
  }
  if (f.launch.ranks_per_node < 0) {
    return "--ranks-per-node must be >= 0 (got " + std::to_string(f.launch.ranks_per_node) + ")";
  }
  if (f.capacity_given() && !(f.capacity_factor > 0 && std::isfinite(f.capacity_factor))) {
    return "--capacity-factor must be a positive number (got " + std::to_string(f.capacity_factor) + ")";
  }
  if (o.overflow_policy == "dropless" && f.capacity_given()) {
    return "--capacity-factor has no effect with --overflow-policy dropless; use drop or reroute";
  }
  // Adaptive top-k: bounds against each other here, max_k against the model at open.
  for (const auto& [name, opt, v] : {std::tuple{"--min-k", f.min_k_option, o.min_k},
                                     std::tuple{"--max-k", f.max_k_option, o.max_k}}) {
    if (f.given(opt) && !o.adaptive_k) return std::string(name) + " applies to --adaptive-k";
    if (f.given(opt) && v < 1) return std::string(name) + " must be >= 1 (got " + std::to_string(v) + ")";
  }
  if (f.given(f.min_k_option) && f.given(f.max_k_option) && o.min_k > o.max_k) {
    return "--min-k " + std::to_string(o.min_k) + " exceeds --max-k " + std::to_string(o.max_k);
  }
  if (f.given(f.adaptive_k_target_option)) {
    if (!o.adaptive_k) return "--adaptive-k-target applies to --adaptive-k";
    if (!(f.adaptive_k_target > 0 && std::isfinite(f.adaptive_k_target))) {
      return "--adaptive-k-target must be a positive number (got " + format_g(f.adaptive_k_target) + ")";
    }
  }
  if (o.rebalance_every < 0) return "--rebalance-every must be >= 0 (got " + std::to_string(o.rebalance_every) + ")";
  if (o.slots_per_rank < 0) return "--slots-per-rank must be >= 0 (got " + std::to_string(o.slots_per_rank) + ")";
  if (o.replica_cap < 1) return "--replica-cap must be >= 1 (got " + std::to_string(o.replica_cap) + ")";
  if (o.min_replicas < 1) return "--min-replicas must be >= 1 (got " + std::to_string(o.min_replicas) + ")";
  if (o.min_replicas > 1 && !launched_under_mpi()) {
    return "--min-replicas places expert replicas on EP ranks: run under mpirun with --ep N";
  }
  if (o.min_replicas > f.launch.ep && f.launch.tp == 1) {
    return "--min-replicas " + std::to_string(o.min_replicas) + " exceeds --ep " + std::to_string(f.launch.ep) +
           " (an expert's replicas sit on distinct ranks)";
  }
  if (!(o.rebalance_min_gain >= 0 && o.rebalance_min_gain < 1)) {
    return "--rebalance-min-gain must be in [0, 1) (got " + std::to_string(o.rebalance_min_gain) + ")";
  }
  if ((!o.placement_file.empty() || o.rebalance_every > 0) && !launched_under_mpi()) {
    return std::string(o.placement_file.empty() ? "--rebalance-every" : "--placement") +
           " places experts on EP ranks: run under mpirun with --ep N";
  }
  if (!(o.stats_ema_decay >= 0 && o.stats_ema_decay < 1)) {
    return "--stats-ema-decay must be in [0, 1) (got " + std::to_string(o.stats_ema_decay) + ")";
  }
  return "";
}

int fail_rank(int rank, const Status& status) {
  const bool comm_failure =
      status.code() == StatusCode::kUnavailable || status.code() == StatusCode::kDeadlineExceeded;
  if (!launched_under_mpi()) return fail(status.message());
  const std::string who = rank >= 0 ? "rank " + std::to_string(rank) + ": " : "";
  if (!comm_failure) return fail(who + status.message());
  std::fprintf(stderr,
               "error: %sthe expert-parallel group failed (%s); ending every rank of the job (MPI_Abort), since "
               "no rank can finish without the lost peer\n",
               who.c_str(), status.message().c_str());
  std::fflush(stderr);
  mpi_abort(1);
}

std::string requested_comm_backend(int argc, char** argv) {
  std::string backend = "mpi";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--comm-backend" && i + 1 < argc) backend = argv[i + 1];
    if (a.rfind("--comm-backend=", 0) == 0) backend = a.substr(15);
  }
  return backend;
}

double EngineFlags::idle_heartbeat_seconds() const { return std::min(5.0, launch.comm_timeout_seconds / 4); }

StatusOr<LaunchedEngine> launch_engine_from_flags(const EngineFlags& f, const std::string& command) {
  EngineOptions options = f.options;
  if (options.model_dir.empty()) options.model_dir = default_model_dir();
  options.a2a_bf16 = f.a2a_dtype == "bf16";
  options.fp8_mode = f.fp8 == "dequant" ? Fp8Mode::kDequant : Fp8Mode::kNative;
  options.a2a_hierarchical = f.a2a_mode == "auto" ? -1 : (f.a2a_mode == "hierarchical" ? 1 : 0);
  options.fused_moe = f.fused_moe == "on";
  options.dp_attention = f.dp_attention == "on";  // DP-attention
  options.check_weights_finite = !f.skip_weight_check;
  // Given alone, a capacity factor means --overflow-policy drop (resolved by the engine).
  if (f.capacity_given()) options.capacity_factor = f.capacity_factor;
  if (f.given(f.adaptive_k_target_option)) options.adaptive_k_target = f.adaptive_k_target;  // adaptive top-k
  EpLaunchOptions launch = f.launch;
  launch.command = command;
  if (launch.tp > 1 && !f.ep_given()) launch.ep = 0;  // the EP size follows from mpirun's ranks
  return launch_engine(options, launch);
}

// Per-step traces (--trace).
int write_trace_or_fail(Engine& engine, int rank, const std::string& path) {
  Status st = engine.write_trace();
  if (!st.ok()) return fail_rank(rank, st.with_context("--trace"));
  if (rank == 0 && !path.empty()) std::fprintf(stderr, "wrote trace %s\n", path.c_str());
  return 0;
}

}  // namespace moe::cli
