// moe::EngineOptions: what Engine::open (include/moe/engine.h) loads and how it runs:
// the model, threads, expert parallelism, expert capacity, placement and rebalancing,
// batch-invariant kernels. Plain data; front ends (the `moe` CLI, tests) fill it in.
#pragma once

#include <optional>
#include <string>

namespace moe {

class Communicator;  // src/moe/comm/communicator.h

// How FP8 weights (a checkpoint with quantization_config, e.g. DeepSeek-V3) are used:
// kept in FP8 in memory and dequantised inside the GEMV/GEMM kernels (native: half the
// weight bytes of bf16 per decode token), or dequantised once at load to bf16 copies
// (dequant). No effect on a model without FP8 weights.
enum class Fp8Mode { kNative, kDequant };

struct EngineOptions {
  std::string model_dir;  // config.json + safetensors (+ index) + tokenizer.model
  int num_threads = 0;    // OpenMP threads for kernels; 0 = all cores
  // Expert parallelism: experts sharded over comm's ranks (contiguous blocks); each
  // rank loads only its experts. Not owned; must outlive the Engine. Engine::open is
  // then collective: all ranks check they loaded the same model (fingerprint) and
  // agree on success, so a failure on one rank is an error on every rank.
  Communicator* comm = nullptr;
  // Under EP: the communicator's deadline once serving (seconds). Engine::open and a
  // worker's wait for rank 0's first step header keep the communicator's own (the launch
  // gives it the longer start-up deadline, include/moe/launch.h); rank 0 switches when
  // open returns, each worker after that first header. 0 = keep the communicator's.
  double comm_timeout_seconds = 0;
  // Tensor parallelism: the world (comm's ranks) is tp_size x ep_size ranks;
  // world rank r has tp rank r % tp_size and EP rank r / tp_size, so a TP group is
  // tp_size consecutive ranks, which must lie on one node (docs/architecture.md). Each
  // rank of a TP group holds 1/tp_size of every attention head set, MLP and expert
  // intermediate dim and of the vocabulary (embedding, lm_head); EP spans the TP groups.
  // tp_size > 1 needs comm (size divisible by tp_size); 1 = no tensor parallelism.
  int tp_size = 1;
  // EP group size; 0 = comm's size / tp_size. tp_size * ep_size must equal comm's size
  // (InvalidArgument naming --tp and --ep otherwise).
  int ep_size = 0;
  // Hybrid only (tp_size > 1 and ep_size > 1): MoE layers run MixServe's fused
  // reduce-scatter -> all-to-all -> all-gather instead of an all-reduce followed by the
  // all-to-all. No effect otherwise.
  bool fused_moe = true;
  // DP-attention (SGLang's and vLLM's data-parallel attention): each TP group
  // (one per node; each rank without TP) runs attention for its own share of the
  // scheduler's sequences, which keep their KV cache on that group; the MoE layers stay
  // expert-parallel across the groups; logits return to rank 0. A single-sequence
  // Engine::generate runs on rank 0's group. Needs comm and ep_size > 1; refused (naming
  // --dp-attention) with --rebalance-every and with a backend that re-forms (gloo).
  bool dp_attention = false;
  // Overlap of the MoE all-to-all with expert compute: the tokens split into
  // micro-batches, pipelined (src/moe/moe/ep_moe_layer.h), with the flat and the
  // hierarchical all-to-all alike (src/moe/moe/ep_hierarchical.h); a2a_hierarchical -1
  // (auto) chooses as without overlap (logged on several nodes).
  bool ep_overlap = false;
  // With ep_overlap: micro-batches per MoE call, 2..8; 0 = auto (about 64 tokens each,
  // from the group's mean tokens per rank). Set without ep_overlap, or another value:
  // InvalidArgument naming --ep-micro-batches.
  int ep_micro_batches = 0;
  // KV cache element type (--kv-dtype): "f32" (default), "bf16" or "f16". A
  // 16-bit cache halves the bytes decode attention reads per step and the memory per
  // cached token (the scheduler's default pool holds twice the tokens); keys and values
  // are rounded to nearest when written, and attention reads them directly (f32
  // arithmetic). Another name, or a 16-bit cache for a multi-head latent attention model
  // (its latent cache is f32 only): InvalidArgument naming --kv-dtype.
  std::string kv_dtype = "f32";
  bool a2a_bf16 = false;    // dispatch/combine activations as bf16 (half the bytes)
  // Two-level all-to-all (inter-node, then intra-node): -1 = when comm spans several
  // nodes, 0 = never (flat), 1 = always.
  int a2a_hierarchical = -1;
  // Node-limited routing (DeepSeek-V3): each token's top-k restricted to experts on
  // at most this many nodes, chosen by their summed affinities; 0 = off.
  int max_nodes_per_token = 0;
  // Expert capacity (GShard / Switch Transformer): "dropless" (no capacity), "drop",
  // "reroute" or "adaptive_requeue" (src/moe/moe/capacity.h). With drop/reroute each expert takes at most
  // ceil(tokens * top_k * capacity_factor / num_experts) assignments per step, tokens
  // counted over all EP ranks. capacity_factor must be > 0.
  // Empty overflow_policy (the default): "drop" when capacity_factor is set, else
  // "dropless" (a capacity factor given alone means drop; resolved_overflow_policy()).
  // A capacity_factor with overflow_policy "dropless" is refused (InvalidArgument).
  std::string overflow_policy{};
  std::optional<double> capacity_factor{};  // unset: 1.0 (resolved_capacity_factor())
  // Adaptive top-k (the exact rule is in src/moe/moe/adaptive_k.h): every
  // token uses at most max_k experts, and when an expert's step load (over all EP ranks)
  // exceeds the load target ceil(tokens * max_k * F / experts), it sheds its assignments
  // in slots >= min_k with the smallest weight shares, so no token falls below min_k;
  // the kept weights are renormalised when the router normalises its top-k. F =
  // adaptive_k_target, else capacity_factor, else 1.0. Works with every overflow
  // policy (which then runs on the reduced routing). Engine::open refuses (InvalidArgument
  // naming min_k / max_k) min_k < 1, min_k > max_k, max_k > the model's experts per
  // token, a target <= 0, and min_k / max_k / adaptive_k_target without adaptive_k.
  // Like drop/reroute, it makes a token's experts depend on the other tokens of its step,
  // so batch_invariant's guarantee (logits independent of the batch) does not hold with it.
  bool adaptive_k = false;
  int min_k = 0;  // 0 = 1
  int max_k = 0;  // 0 = the model's experts per token
  std::optional<double> adaptive_k_target{};
  // Decay of the per-step exponential moving average in the expert-load statistics.
  double stats_ema_decay = 0.9;
  // Expert placement under EP (src/moe/placement/): a static plan file (`moe placement
  // plan` output: per MoE layer, the experts on each rank, replicas allowed) used from
  // start-up; empty = contiguous blocks, one copy each.
  std::string placement_file{};
  // Live rebalancing every N decode steps (0 = never): the load statistics feed the
  // planner, expert weights move between ranks point-to-point, all ranks switch at the
  // same step boundary; a failed migration keeps the old plan (logged).
  int rebalance_every = 0;
  int slots_per_rank = 0;  // expert slots per rank for rebalancing; 0 = ceil(experts / ranks)
  int replica_cap = 4;     // most replicas of one expert when rebalancing
  // Fault tolerance: every expert keeps >= min_replicas replicas on distinct EP ranks (so
  // losing any min_replicas - 1 ranks leaves it a live copy). > 1: without a placement
  // file the start-up placement is planned (uniform load) to hold it, rebalancing keeps
  // it, and a placement file giving an expert fewer is refused (InvalidArgument naming
  // the layer and expert). slots_per_rank 0 then means ceil(experts * min_replicas / ranks).
  int min_replicas = 1;
  // Failover (a communicator that can re-form, e.g. Gloo): after the group lost ranks,
  // how long the survivors wait (seconds, >= 0) for the experts left with no live
  // replica to be re-loaded before serving on in degraded mode (their tokens sent to the
  // next-best live expert until the loads are done). 0 = serve degraded at once.
  double failover_wait_seconds = 2;
  // Failover: when the group re-forms, how long rank 0 waits for the survivors to check
  // in (seconds, > 0); a survivor that has not checked in by then is left out with the
  // failed ranks. A loaded host may need longer than the default.
  double failover_join_seconds = 3;
  // A new plan is adopted only if it lowers the predicted max rank load (summed over
  // MoE layers, from the load EMA) by at least this fraction: moving experts costs time.
  double rebalance_min_gain = 0.1;
  // Batch-invariant kernels: every token's logits are bitwise the same whatever other
  // tokens share its forward pass (prompt chunking, batch size, other requests). Linear
  // layers then use the GEMV kernel for any token count instead of sgemm for prefill,
  // and attention one query at a time. Per engine (passed to its decoder as KernelOptions).
  // `moe serve` turns it on by default; with it `moe generate` gives bitwise the tokens
  // and logits a served request gets.
  bool batch_invariant = false;
  // Multi-head latent attention models (DeepSeek-V2/V3, Kimi-K2): how attention runs.
  // "naive" expands per-head keys and values from the latent cache; "absorbed" folds
  // the up-projections into the query and output and attends in the latent space;
  // "auto" (default) takes per sequence and step the one with fewer multiply-adds (naive
  // for a fresh prompt, absorbed for decode), and absorbed throughout under
  // batch_invariant (docs/performance.md has the figures).
  // Anything else, or naive/absorbed for a GQA model: InvalidArgument from Engine::open.
  std::string mla_attention = "auto";
  // FP8 weights: dequant (default) or native. Native reads half the weight bytes per
  // decode token, but `moe bench fp8` measured the bf16 GEMV 1.6-2x faster per call on
  // DeepSeek-expert-shaped matrices on our CPUs (the FP8 decode is compute-bound on one
  // core); native is the choice when memory is the limit (a model that fits only in FP8).
  // native on a model without FP8 weights: InvalidArgument from Engine::open.
  Fp8Mode fp8_mode = Fp8Mode::kDequant;
  // Per-step trace (`--trace FILE`, docs/tracing.md): empty = off; else every rank
  // records its spans (attention, router, dispatch, expert compute, combine, waits) and
  // per-link bytes, and Engine::write_trace() gathers them to rank 0, which writes this
  // Chrome trace-event JSON file. Rank 0 checks at open that its directory exists.
  // trace_max_events (>= 1) events are kept per rank (40 bytes each, allocated at open);
  // later ones are dropped and counted in the file.
  std::string trace_path{};
  int64_t trace_max_events = 1000000;
  // Hardening: Engine::open refuses (DataLoss naming the tensor) a checkpoint
  // whose loaded weights hold a NaN or Inf: one scan of the bytes this process holds
  // (`moe ... --skip-weight-check` turns it off). Under expert parallelism every rank
  // also compares a digest of every expert with rank 0's, always.
  bool check_weights_finite = true;
  // Kernels and weight formats (src/moe/ops/kernel_isa.h, model/int8_quant.h).
  // kernels: the linear kernels' instruction set, "auto" (default: the best this CPU
  // has), "avx2", "avx512" or "avx512-bf16"; one the CPU lacks, or another name, is
  // InvalidArgument from Engine::open. weights: "native" (default: as the checkpoint
  // stores them, or fp8_mode) or "int8" (projections quantised at load to 8-bit codes
  // with a scale per 32 weights, q8_0-like; ~1.1 bytes per weight).
  std::string kernels = "auto";
  std::string weights = "native";
  // Where the matrices this process decodes with live (model/weights_relocate.h): "on"
  // copies them at open into anonymous memory in transparent huge pages (2 MiB), read
  // ~1.5x faster by decode than the 4 KiB pages of the mapped files; "off" leaves them in
  // the mapped files (pages shared with other processes on the host); "auto" (default):
  // on when the kernel offers huge pages (transparent_hugepage/enabled is always or
  // madvise), the weights come from a Hugging Face directory and are at least 64 MiB;
  // off for an expert store (its restored buffers are already this process's memory: a
  // copy would double them) and for smaller models (they stay in the CPU caches). The
  // copy costs start-up time: ~0.1-0.5 s per GB, up to ~10 s per GB in a VM whose host
  // backs guest memory lazily (docs/performance.md).
  // Another name is InvalidArgument from Engine::open.
  std::string hugepages = "auto";
  // Precision of the prefill matmuls (GEMM, more than 4 tokens per call) on bf16 weights,
  // named as torch.set_float32_matmul_precision: "highest" (default: activations stay
  // f32, OpenBLAS sgemm on weight blocks converted to f32) or "medium" (activations
  // rounded to bf16, oneDNN's AVX-512 BF16 matmul; ~2x faster prefill, ~2^-9 relative
  // error per activation, as llama.cpp's bf16 matmul). Decode (GEMV) is exact either way.
  // "medium" is InvalidArgument from Engine::open unless kernels resolve to avx512-bf16,
  // batch_invariant is false (the batch-invariant kernels run no GEMM), weights is
  // "native" and the checkpoint holds bf16 matrices.
  std::string matmul_precision = "highest";
};

// The overflow policy Engine::open applies: options.overflow_policy when set, else
// "drop" if options.capacity_factor is set and "dropless" otherwise. The name is not
// checked here (Engine::open returns InvalidArgument for an unknown one).
inline std::string resolved_overflow_policy(const EngineOptions& options) {
  if (!options.overflow_policy.empty()) return options.overflow_policy;
  return options.capacity_factor.has_value() ? "drop" : "dropless";
}

// The capacity factor Engine::open applies: options.capacity_factor, or 1.0 when unset.
inline double resolved_capacity_factor(const EngineOptions& options) { return options.capacity_factor.value_or(1.0); }

// Adaptive k's load-target factor: adaptive_k_target, else the capacity factor (1.0 unset).
inline double resolved_adaptive_k_target(const EngineOptions& options) {
  return options.adaptive_k_target.value_or(resolved_capacity_factor(options));
}

}  // namespace moe
