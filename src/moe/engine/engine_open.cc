// Engine::open: loads the model on this rank, agrees with the other EP ranks, wires
// the decoder, the load statistics and the EP session.
#include "moe/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <omp.h>
#include <sys/stat.h>

#include <set>
#include <thread>
#include <unordered_set>
#include <utility>

#include <nlohmann/json.hpp>

#include "moe/comm/communicator.h"
#include "moe/core/clock.h"
#include "moe/core/logging.h"
#include "moe/core/phase_timer.h"
#include "moe/engine/engine_hugepages.h"
#include "moe/engine/engine_impl.h"
#include "moe/engine/engine_tp.h"
#include "moe/engine/expert_loader.h"
#include "moe/engine/peer_expert_recovery.h"
#include "moe/model/config.h"
#include "moe/model/config_fit.h"
#include "moe/model/fingerprint.h"
#include "moe/model/weight_checks.h"
#include "moe/model/weights_relocate.h"
#include "moe/model/fp8_dequant.h"
#include "moe/model/int8_quant.h"
#include "moe/model/hf_checkpoint.h"
#include "moe/model/tokenizer.h"
#include "moe/model/weights.h"
#include "moe/moe/capacity.h"
#include "moe/moe/ep_moe_layer.h"
#include "moe/placement/placement_plan.h"
#include "moe/placement/replica_planner.h"
#include "moe/runtime/ep_session.h"
#include "moe/runtime/failover.h"
#include "moe/runtime/rebalancer.h"
#include "moe/stats/expert_load_stats.h"
#include "moe/store/store_layout.h"
#include "moe/store/store_model.h"
#include "moe/transformer/decoder.h"

namespace moe {

namespace {

// EngineCore::kv_cache_key: the fingerprint and every option that changes the numbers a
// prefix's KV holds (one line; the prefix cache hashes it into every key).
std::string kv_cache_key(uint64_t fingerprint, const EngineOptions& o) {
  char fp[17];
  std::snprintf(fp, sizeof(fp), "%016llx", static_cast<unsigned long long>(fingerprint));
  std::string key = std::string("model=") + fp + " kv_dtype=" + o.kv_dtype + " weights=" + o.weights +
                    " fp8=" + (o.fp8_mode == Fp8Mode::kNative ? "native" : "dequant") +
                    " kernels=" + o.kernels + " batch_invariant=" + (o.batch_invariant ? "1" : "0") +
                    " matmul_precision=" + o.matmul_precision + " mla=" + o.mla_attention +
                    " tp=" + std::to_string(o.tp_size) + " overflow=" + resolved_overflow_policy(o) +
                    " capacity=" + std::to_string(resolved_capacity_factor(o)) +
                    " adaptive_k=" + (o.adaptive_k ? "1" : "0") + " min_k=" + std::to_string(o.min_k) +
                    " max_k=" + std::to_string(o.max_k) +
                    " max_nodes_per_token=" + std::to_string(o.max_nodes_per_token);
  if (o.adaptive_k_target) key += " adaptive_k_target=" + std::to_string(*o.adaptive_k_target);
  return key;
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Per-layer placements from a plan file (`moe placement plan`): one plan layer per MoE
// layer, for this many ranks and experts, each expert on >= min_replicas ranks.
Status apply_placement_file(const std::string& path, int min_replicas, Engine::Impl* impl) {
  MOE_ASSIGN_OR_RETURN(PlacementPlan plan, load_plan_file(path));
  const ModelConfig& c = impl->config;
  const int R = impl->ep_comm->size();
  if (plan.num_ranks != R) {
    return invalid_argument(path + ": the plan is for " + std::to_string(plan.num_ranks) + " ranks, but " +
                            std::to_string(R) + " are running");
  }
  if (plan.num_experts != c.router.num_experts) {
    return invalid_argument(path + ": the plan places " + std::to_string(plan.num_experts) + " experts, the model has " +
                            std::to_string(c.router.num_experts));
  }
  std::vector<bool> covered(static_cast<size_t>(c.num_hidden_layers), false);
  for (const LayerPlan& lp : plan.layers) {
    if (lp.layer >= c.num_hidden_layers || !c.is_moe_layer(lp.layer)) {
      return invalid_argument(path + ": plan layer " + std::to_string(lp.layer) + " is not an MoE layer of the model");
    }
    MOE_ASSIGN_OR_RETURN(impl->ep[static_cast<size_t>(lp.layer)].placement,
                         ExpertPlacement::from_rank_slots(lp.rank_slots, c.router.num_experts));
    const std::vector<int> counts = count_replicas(lp, c.router.num_experts);
    for (size_t e = 0; e < counts.size(); ++e) {
      if (counts[e] < min_replicas) {
        return invalid_argument(path + ": layer " + std::to_string(lp.layer) + ", expert " + std::to_string(e) + " has " +
                                std::to_string(counts[e]) + " replica(s), fewer than min_replicas " +
                                std::to_string(min_replicas) + " (plan it with moe placement plan --min-replicas " +
                                std::to_string(min_replicas) + ")");
      }
    }
    covered[static_cast<size_t>(lp.layer)] = true;
  }
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    if (c.is_moe_layer(l) && !covered[static_cast<size_t>(l)]) {
      return invalid_argument(path + ": the plan has no entry for MoE layer " + std::to_string(l));
    }
  }
  return ok_status();
}

// min_replicas > 1 without a plan file: the start-up placement is planned for uniform
// load (replica_planner.h), so every expert starts on >= min_replicas ranks (spread over
// nodes where there are several). slots_per_rank 0 = ceil(experts * min_replicas / ranks).
Status plan_min_replica_placement(const EngineOptions& options, Engine::Impl* impl) {
  const ModelConfig& c = impl->config;
  const Communicator& comm = *impl->ep_comm;
  const int R = comm.size(), E = c.router.num_experts, m = options.min_replicas;
  PlannerInput in;
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    if (!c.is_moe_layer(l)) continue;
    in.load.emplace_back(static_cast<size_t>(E), 1.0);
    in.layer_ids.push_back(l);
  }
  if (in.load.empty()) return ok_status();
  in.num_ranks = R;
  in.num_nodes = R % comm.num_nodes() == 0 ? comm.num_nodes() : 1;
  in.slots_per_rank = options.slots_per_rank > 0 ? options.slots_per_rank : (E * m + R - 1) / R;
  in.replica_cap = options.replica_cap;
  in.min_replicas = m;
  auto plan = plan_placement(in);
  if (!plan.ok()) {
    return invalid_argument("min_replicas " + std::to_string(m) + ": cannot place " + std::to_string(E) +
                            " experts on " + std::to_string(R) + " ranks: " + plan.status().message());
  }
  for (const LayerPlan& lp : plan->layers) {
    MOE_ASSIGN_OR_RETURN(impl->ep[static_cast<size_t>(lp.layer)].placement, layer_placement(lp, E));
  }
  MOE_LOG_INFO("start-up placement: every expert on >= {} of {} ranks, {} slots per rank", m, R, in.slots_per_rank);
  return ok_status();
}

// Failover (runtime/failover.h): lost experts are re-loaded from this rank's own
// files: the checkpoint store (hash-verified) or the Hugging Face directory.
FailoverInputs make_failover_inputs(const EngineOptions& options, Engine::Impl* impl) {
  FailoverInputs in;
  in.comm = impl->comm;
  in.config = &impl->config;
  in.ep = &impl->ep;
  in.layers = &impl->weights.layers;
  in.expert_store = &impl->expert_store;
  int slots = options.slots_per_rank;
  for (const EpContext& ctx : impl->ep) slots = std::max(slots, ctx.placement.max_experts_per_rank());
  in.slots_per_rank = std::max(slots, 1);
  in.wait_seconds = options.failover_wait_seconds;
  const bool dequant = options.fp8_mode == Fp8Mode::kDequant;
  const bool int8 = impl->kernel_choice.int8_weights;
  in.load_expert = [impl, dequant, int8](int layer, int expert, std::vector<LayerWeights>* layers,
                                   ExpertStore* store) -> Status {
    ExpertWeights& w = (*layers)[static_cast<size_t>(layer)].experts[static_cast<size_t>(expert)];
    if (impl->store != nullptr) {
      MOE_RETURN_IF_ERROR(load_expert_from_store(*impl->store, impl->config, layer, expert, MigrationTarget{layers, store}));
    } else {
      MOE_RETURN_IF_ERROR(bind_expert(impl->config, *impl->source, layer, expert, &w));
      w.loaded = true;
    }
    if (dequant && (w.w1.has_scale() || w.w2.has_scale() || w.w3.has_scale())) {
      dequantize_expert_to_bf16(&w, &(*store)[{layer, expert}]);  // as the experts loaded at start-up
    }
    if (int8) quantize_expert_to_int8(&w, &(*store)[{layer, expert}]);  // --weights int8, as at start-up
    return ok_status();
  };
  return in;
}

// Loads everything this rank needs; no communication. Marks its phases on `phases`.
Status open_local(const EngineOptions& options, Engine::Impl* impl, PhaseTimer* phases) {
  const std::string& dir = options.model_dir;
  if (!is_directory(dir)) return not_found("model directory not found: " + dir);
  // A checkpoint store (store_layout.h: a CURRENT file) or a Hugging Face directory,
  // opened (its manifest, or its mapped files) but no tensor read; then config.json,
  // checked against the tensors' names and shapes before anything is sized by it
  // (config_fit.h).
  std::unique_ptr<StoreModel> store;
  std::unique_ptr<HfCheckpoint> checkpoint;
  if (is_store_dir(dir)) {
    MOE_ASSIGN_OR_RETURN(store, StoreModel::open(dir));
    phases->mark("open files");
    MOE_ASSIGN_OR_RETURN(impl->config, load_model_config_checked(*store));
  } else {
    auto opened = HfCheckpoint::open(dir);
    if (!opened.ok()) {
      MOE_RETURN_IF_ERROR(load_model_config(dir).status());  // config.json's errors before the weights'
      return opened.status();
    }
    checkpoint = std::make_unique<HfCheckpoint>(std::move(opened).value());
    phases->mark("open files");
    MOE_ASSIGN_OR_RETURN(impl->config, load_model_config_checked(*checkpoint));
  }
  phases->mark("config");
  const RouterConfig& rc = impl->config.router;
  if (impl->config.family == ModelFamily::kDeepseekV2 && rc.norm_topk_prob && rc.routed_scaling_factor != 1.0) {
    // Sources disagree here (tools/reference/README.md): DeepSeek's V2 code normalises
    // instead of scaling, transformers' scales without normalising; every published V2
    // checkpoint has norm_topk_prob false, where all agree.
    MOE_LOG_WARN("{}/config.json: deepseek_v2 with norm_topk_prob true and routed_scaling_factor {}: expert weights are "
                 "normalised and then scaled (as vLLM and llama.cpp do; DeepSeek's V2 code only normalises)",
                 dir, rc.routed_scaling_factor);
  }
  if (options.mla_attention != "auto" && options.mla_attention != "naive" && options.mla_attention != "absorbed") {
    return invalid_argument("mla_attention '" + options.mla_attention + "' is not one of auto, naive, absorbed");
  }
  if (options.fp8_mode == Fp8Mode::kNative && !impl->config.fp8.enabled) {
    // Once accepted and silently ignored: there are no FP8 weights to keep.
    return invalid_argument("fp8_mode native (--fp8 native) applies to FP8 checkpoints; " + dir +
                            "/config.json has no quantization_config with quant_method 'fp8'");
  }
  if (options.mla_attention != "auto" && !impl->config.mla.enabled()) {
    return invalid_argument("mla_attention '" + options.mla_attention +
                            "' applies to multi-head latent attention models (DeepSeek-V2/V3, Kimi-K2); " + dir +
                            " has model_type '" + impl->config.model_type + "'");
  }
  if (options.ep_micro_batches != 0 && (options.ep_micro_batches < 2 || options.ep_micro_batches > kMaxEpMicroBatches)) {
    return invalid_argument("--ep-micro-batches " + std::to_string(options.ep_micro_batches) + " must be 0 (auto) or 2.." +
                            std::to_string(kMaxEpMicroBatches));
  }
  if (options.ep_micro_batches != 0 && !options.ep_overlap) {
    return invalid_argument("--ep-micro-batches " + std::to_string(options.ep_micro_batches) +
                            " applies to the overlapped all-to-all: add --ep-overlap");
  }
  {
    const std::optional<DType> kv = options.kv_dtype == "f32"    ? std::optional<DType>(DType::kF32)
                                     : options.kv_dtype == "bf16" ? std::optional<DType>(DType::kBF16)
                                     : options.kv_dtype == "f16"  ? std::optional<DType>(DType::kF16)
                                                                  : std::nullopt;
    if (!kv) return invalid_argument("--kv-dtype '" + options.kv_dtype + "' is not one of f32, bf16, f16");
    const std::string why = kv_dtype_error(impl->config, *kv);
    if (!why.empty()) return invalid_argument(dir + ": " + why);
    impl->kv_dtype = *kv;
  }
  MOE_ASSIGN_OR_RETURN(impl->kernel_choice, choose_kernels(options));
  if (!(options.failover_wait_seconds >= 0 && std::isfinite(options.failover_wait_seconds))) {
    return invalid_argument("failover_wait_seconds must be a finite number of seconds >= 0");
  }
  if (!(options.failover_join_seconds > 0 && std::isfinite(options.failover_join_seconds))) {
    return invalid_argument("failover_join_seconds must be a finite number of seconds > 0");
  }
  if (options.min_replicas < 1 || (options.min_replicas > 1 && impl->comm == nullptr)) {
    return invalid_argument("min_replicas " + std::to_string(options.min_replicas) +
                            (options.min_replicas < 1 ? " must be >= 1" : " needs expert parallelism (a communicator)"));
  }
  if (impl->tensor_parallel()) {
    // Heads and intermediate sizes must split evenly (names the config.json field and --tp).
    MOE_RETURN_IF_ERROR(check_tp_shardable(impl->config, impl->groups.tp_size));
  }
  MOE_ASSIGN_OR_RETURN(impl->capacity.policy, parse_overflow_policy(resolved_overflow_policy(options)));
  if (impl->capacity.policy == OverflowPolicy::kDropless && options.capacity_factor.has_value()) {
    return invalid_argument("capacity_factor has no effect with overflow_policy 'dropless' (no capacity): use "
                            "'drop' or 'reroute', or leave capacity_factor unset");
  }
  impl->capacity.capacity_factor = resolved_capacity_factor(options);
  MOE_RETURN_IF_ERROR(validate_capacity_options(impl->capacity));
  // Adaptive top-k: a bound given without it would be silently ignored.
  if (!options.adaptive_k && (options.min_k != 0 || options.max_k != 0 || options.adaptive_k_target.has_value())) {
    return invalid_argument(std::string(options.min_k != 0 ? "min_k" : options.max_k != 0 ? "max_k" : "adaptive_k_target") +
                            " is set but adaptive_k is off: enable adaptive_k or leave it unset");
  }
  impl->capacity.adaptive = {options.adaptive_k, options.min_k == 0 ? 1 : options.min_k, options.max_k,
                             resolved_adaptive_k_target(options), impl->config.router.norm_topk_prob};
  MOE_RETURN_IF_ERROR(validate_adaptive_k(impl->capacity.adaptive, impl->config.router.top_k));
  std::vector<int> moe_layers;
  for (int l = 0; l < impl->config.num_hidden_layers; ++l) {
    if (impl->config.is_moe_layer(l)) moe_layers.push_back(l);
  }
  MOE_ASSIGN_OR_RETURN(ExpertLoadStats stats,
                       ExpertLoadStats::create(moe_layers, impl->config.router.num_experts, options.stats_ema_decay));
  impl->load_stats = std::make_unique<ExpertLoadStats>(std::move(stats));
  if (store == nullptr) impl->source = std::move(checkpoint);
  merge_generation_config(store ? static_cast<const ModelSource&>(*store) : *impl->source, &impl->config);
  ExpertFilter filter;
  if (impl->ep_comm != nullptr) {
    // Experts over the EP group (the world without TP); under TP every rank of a TP group
    // holds the same experts, each a slice of them (shard_weights).
    Communicator* ep_comm = impl->ep_comm;
    if (impl->config.router.num_experts < 1) return invalid_argument("model has no experts to shard");
    EpContext ctx;
    ctx.comm = ep_comm;
    ctx.placement = ExpertPlacement::contiguous(impl->config.router.num_experts, ep_comm->size());
    ctx.options.overlap = options.ep_overlap;
    ctx.options.micro_batches = options.ep_micro_batches;
    ctx.options.a2a_bf16 = options.a2a_bf16;
    ctx.options.hierarchical =
        options.a2a_hierarchical == 1 || (options.a2a_hierarchical < 0 && ep_comm->num_nodes() > 1);
    if (impl->tensor_parallel() && options.fused_moe) {
      // The fused path's EP group has one rank per node: its all-to-all is flat (the
      // hierarchical one would have nothing to forward inside a node).
      if (options.a2a_hierarchical == 1) {
        return invalid_argument("--a2a-mode hierarchical with --tp " + std::to_string(impl->groups.tp_size) +
                                " --fused-moe on: the fused MoE's EP group has one rank per node; use --a2a-mode "
                                "flat or auto, or --fused-moe off");
      }
      ctx.options.hierarchical = false;
    }
    if (options.a2a_hierarchical < 0 && ep_comm->num_nodes() > 1 && ep_comm->rank() == 0) {
      // auto on several nodes: the same choice with or without --ep-overlap (the
      // hierarchical exchange pipelines its micro-batches too: ep_hierarchical.h).
      MOE_LOG_INFO("--a2a-mode auto: the EP group spans {} nodes: {} all-to-all{}", ep_comm->num_nodes(),
                   ctx.options.hierarchical ? "hierarchical" : "flat",
                   options.ep_overlap ? " with overlap (pipelined micro-batches)" : "");
    }
    ctx.options.max_nodes_per_token = options.max_nodes_per_token;
    ctx.options.capacity = impl->capacity;
    impl->ep.assign(static_cast<size_t>(impl->config.num_hidden_layers), ctx);
    for (size_t l = 0; l < impl->ep.size(); ++l) impl->ep[l].layer_id = static_cast<int>(l);
    if (!options.placement_file.empty()) {
      MOE_RETURN_IF_ERROR(apply_placement_file(options.placement_file, options.min_replicas, impl));
    } else if (options.min_replicas > 1) {
      MOE_RETURN_IF_ERROR(plan_min_replica_placement(options, impl));
    }
    const int me = ep_comm->rank();
    const std::vector<EpContext>* layers = &impl->ep;
    filter = [layers, me](int layer, int expert) {
      return (*layers)[static_cast<size_t>(layer)].placement.holds(me, expert);
    };
  }
  phases->mark("options and placement");
  if (store != nullptr) {
    // Only this rank's experts (the filter above), verified as they are read.
    RestoreOptions restore_options;
    restore_options.threads = options.num_threads > 0 ? options.num_threads : 1;
    // Under EP an expert shard with no good local copy may come from a peer's replica
    // (recover_experts_from_peers, after the start-up agreement); alone it is an error.
    // (Not under TP: peer recovery runs over the world's placement.)
    restore_options.tolerate_missing_experts = impl->comm != nullptr && !impl->tensor_parallel();
    RestoreReport report;
    MOE_RETURN_IF_ERROR(store->restore(filter, restore_options, &report));
    MOE_LOG_INFO("restored {}: {} shards ({} of {} experts), {:.1f} MB in {:.3f} s on {} thread(s), {} fallback(s)",
                 store->location(), report.shards_read, report.expert_shards_read, report.expert_shards_total,
                 report.raw_bytes / 1e6, report.seconds, restore_options.threads, report.fallbacks);
    for (const MissingExpert& m : report.missing) {
      MOE_LOG_WARN("layer {}, expert {}: no good local copy ({}); asking the other ranks for theirs", m.layer,
                   m.expert, m.error);
    }
    impl->missing_experts = std::move(report.missing);
    impl->store = store.get();
    impl->source = std::move(store);
    phases->mark("store restore");
  }
  ExpertFilter bind_filter = filter;
  if (!impl->missing_experts.empty()) {
    std::set<std::pair<int, int>> gone;
    for (const MissingExpert& m : impl->missing_experts) gone.insert({m.layer, m.expert});
    bind_filter = [filter, gone](int layer, int expert) {
      return filter(layer, expert) && gone.count({layer, expert}) == 0;
    };
  }
  MOE_ASSIGN_OR_RETURN(impl->weights, bind_weights(impl->config, *impl->source, bind_filter));
  phases->mark("bind weights");
  MOE_ASSIGN_OR_RETURN(impl->tokenizer, Tokenizer::load(*impl->source));
  phases->mark("tokenizer");
  if (impl->tokenizer->vocab_size() > impl->config.vocab_size) {
    return invalid_argument(dir + "/" + impl->tokenizer->file_name() + " has " +
                            std::to_string(impl->tokenizer->vocab_size()) + " token ids, more than config.json vocab_size " +
                            std::to_string(impl->config.vocab_size));
  }
  return ok_status();
}

// --trace: a positive event budget; rank 0 (the writer) needs the file's directory.
Status check_trace_options(const EngineOptions& options, int rank) {
  if (options.trace_path.empty()) return ok_status();
  if (options.trace_max_events < 1) {
    return invalid_argument("trace_max_events must be >= 1 (got " + std::to_string(options.trace_max_events) + ")");
  }
  const std::filesystem::path dir = std::filesystem::path(options.trace_path).parent_path();
  std::error_code ec;
  if (rank == 0 && !dir.empty() && !std::filesystem::is_directory(dir, ec)) {
    return invalid_argument("trace file " + options.trace_path + ": directory " + dir.string() + " does not exist");
  }
  return ok_status();
}

}  // namespace

StatusOr<std::unique_ptr<Engine>> Engine::open(const EngineOptions& options) {
  if (!(options.comm_timeout_seconds >= 0 && std::isfinite(options.comm_timeout_seconds))) {
    return invalid_argument("comm_timeout_seconds must be a finite number of seconds >= 0 (got " +
                            std::to_string(options.comm_timeout_seconds) + ")");
  }
  if (options.num_threads > 0) omp_set_num_threads(options.num_threads);
  auto impl = std::make_unique<Impl>();
  impl->comm = options.comm;
  // Each phase's time, logged at info once open succeeds (one "start-up:" line).
  PhaseTimer phases;
  // The TP and EP groups (collective; its errors are the same on every rank).
  MOE_RETURN_IF_ERROR(open_parallel_groups(options, impl.get()));
  if (impl->comm != nullptr) phases.mark("parallel groups");
  Status local = open_local(options, impl.get(), &phases);
  if (local.ok()) local = check_trace_options(options, impl->comm == nullptr ? 0 : impl->comm->rank());
  // Start-up only, mostly page-ins of the mapped files: every hardware thread.
  const int check_threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  // When the huge-page copy reads the matrices as loaded, it checks them as it copies
  // (the bytes read once); this pass takes the rest (norms, biases, other ranks' experts).
  const bool copy_checks = local.ok() && options.check_weights_finite && copies_source_matrices(*impl, options);
  if (local.ok() && options.check_weights_finite) {
    std::unordered_set<const void*> in_copy;
    if (copy_checks) {
      for (const void* p : weights_copy_sources(impl->weights)) in_copy.insert(p);
    }
    local = check_weights_finite(*impl->source, check_threads, in_copy);
    phases.mark("weight scan");
    if (local.ok()) {
      MOE_LOG_INFO("weight check: no NaN/Inf in the loaded weights{} ({:.3f} s)",
                   copy_checks ? " but the matrices, which the huge-page copy checks" : "",
                   phases.seconds("weight scan"));
    }
  }
  if (impl->comm != nullptr) {
    const uint64_t fp = local.ok() ? model_fingerprint(*impl->source, impl->weights) : 0;
    MOE_RETURN_IF_ERROR(EpSession::agree_on_startup(*impl->comm, local, fp));
    phases.mark("rank agreement");
    // Every rank loaded; now the experts' bytes (each rank holds different ones, so each
    // hashes every expert, or takes the store manifest's hashes).
    const auto t0 = std::chrono::steady_clock::now();
    auto digests = expert_digests(*impl->source, impl->config, check_threads);
    phases.mark("expert digests");
    MOE_LOG_INFO("expert digests: {} experts in {:.3f} s", digests.ok() ? digests->size() : 0,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    MOE_RETURN_IF_ERROR(EpSession::agree_on_experts(*impl->comm, digests, impl->config.router.num_experts));
    phases.mark("rank agreement");
  }
  if (impl->comm != nullptr && !impl->tensor_parallel()) {
    // Collective on every rank (HF ones too: they can serve copies).
    std::vector<ExpertPlacement> placements;
    for (const EpContext& ctx : impl->ep) placements.push_back(ctx.placement);
    PeerRecoveryInputs recovery{.comm = impl->comm,
                                .config = &impl->config,
                                .source = impl->source.get(),
                                .store = impl->store,
                                .placements = &placements,
                                .layers = &impl->weights.layers,
                                .missing = std::move(impl->missing_experts)};
    MOE_RETURN_IF_ERROR(recover_experts_from_peers(recovery));
    phases.mark("peer recovery");
  } else if (!local.ok()) {
    return local;
  }
  // Under TP: the local config and this rank's shard of the weights (views and copies),
  // before FP8 dequantisation so that only the shard is dequantised.
  {
    Status sharded = shard_weights(impl.get());
    if (impl->tensor_parallel()) MOE_RETURN_IF_ERROR(EpSession::agree_on_startup(*impl->comm, sharded, 0));
    MOE_RETURN_IF_ERROR(sharded);
    if (impl->tensor_parallel()) phases.mark("tp shard");
  }
  if (options.fp8_mode == Fp8Mode::kDequant && impl->config.fp8.enabled) {
    Impl* p = impl.get();
    ModelWeights* w = impl->tensor_parallel() ? &impl->tp_weights : &impl->weights;
    const int64_t n = dequantize_weights_to_bf16(w, &impl->fp8_dequantized,
                                                 [p](int l, int e) { return &p->expert_store[{l, e}]; });
    MOE_LOG_INFO("fp8 dequant: {} FP8 matrices dequantised to bf16 at load", n);
    phases.mark("fp8 dequant");
  }
  if (impl->kernel_choice.int8_weights) {
    Impl* p = impl.get();
    ModelWeights* w = impl->tensor_parallel() ? &impl->tp_weights : &impl->weights;
    const int64_t n = quantize_weights_to_int8(w, &impl->int8_quantized,
                                               [p](int l, int e) { return &p->expert_store[{l, e}]; });
    MOE_LOG_INFO("weights int8: {} matrices quantised at load (blocks of 32, f32 scales)", n);
    phases.mark("int8 quant");
  }
  if (impl->kernel_choice.bf16_gemm) {  // matmul_precision "medium" rounds activations for bf16 weights only
    const ModelWeights& w = impl->tensor_parallel() ? impl->tp_weights : impl->weights;
    if (w.lm_head.dtype != DType::kBF16) {
      return invalid_argument(options.model_dir + ": matmul_precision 'medium' applies to bf16 weights; this "
                              "model's projections are held in " + dtype_name(w.lm_head.dtype));
    }
  }
  {
    // Every rank's weights are in place before any rank returns from open: otherwise rank
    // 0's first step waits in its first exchange for ranks still copying weights (their
    // load counted in its first request's time) and computes beside their copies.
    Status placed = place_weights_in_huge_pages(
        impl.get(), HugePageCopy{.mode = options.hugepages, .threads = check_threads, .check_finite = copy_checks});
    if (impl->comm != nullptr) MOE_RETURN_IF_ERROR(EpSession::agree_on_startup(*impl->comm, placed, 0));
    MOE_RETURN_IF_ERROR(placed);
    phases.mark(impl->weight_arena != nullptr ? "huge-page copy" : "other");
  }
  MOE_LOG_INFO("{}", describe_kernels(impl->kernel_choice));
  const std::string& dir = options.model_dir;
  DecoderOptions decoder_options;
  decoder_options.ep = impl->ep_comm ? &impl->ep : nullptr;
  decoder_options.kernel = KernelOptions{options.batch_invariant, impl->kernel_choice.isa, impl->kernel_choice.bf16_gemm};
  if (impl->tensor_parallel()) {
    const ParallelGroups& g = impl->groups;
    decoder_options.tp.comm = g.tp;
    decoder_options.tp.vocab_begin = vocab_shard(impl->config.vocab_size, g.tp_rank, g.tp_size).begin;
    decoder_options.tp.driver_group = g.ep_rank == 0;
    decoder_options.tp.fused_moe = options.fused_moe && g.ep_size > 1;  // hybrid only
    impl->tp_follower = g.ep_rank == 0 && g.tp_rank > 0;
  }
  if (options.dp_attention) {
    // Every TP group drives its own share; the DP group is TP rank 0 of every group.
    const ParallelGroups& g = impl->groups;
    decoder_options.tp.driver_group = true;
    impl->tp_follower = g.tp_rank > 0;
    if (g.tp_rank == 0) decoder_options.dp.comm = impl->ep_comm;
    impl->dp_follower = g.tp_rank == 0 && impl->ep_comm->rank() > 0;
    if (impl->comm->rank() == 0) {
      MOE_LOG_INFO("DP-attention: {} attention groups of {} rank(s); sequences spread over them, MoE EP across",
                   impl->ep_comm->size(), std::max(g.tp_size, 1));
    }
  }
  if (impl->tp_follower || impl->dp_follower) make_follower_caches(impl.get());
  decoder_options.mla_path = options.mla_attention == "naive"      ? MlaPath::kNaive
                             : options.mla_attention == "absorbed" ? MlaPath::kAbsorbed
                                                                   : MlaPath::kAuto;
  impl->decoder = std::make_unique<Decoder>(impl->run_config(), impl->run_weights(), decoder_options);
  phases.mark("decoder");
  impl->decoder->set_capacity(impl->capacity);
  if (!options.trace_path.empty()) {
    impl->trace = std::make_unique<TraceRecorder>(impl->comm ? impl->comm->rank() : 0, options.trace_max_events);
    impl->trace_path = options.trace_path;
    impl->decoder->set_trace(impl->trace.get());
  }
  ExpertLoadStats* stats = impl->load_stats.get();
  impl->decoder->set_routing_hook([stats](int layer, const StepRoutingCounts& counts) {
    stats->record_step(layer, counts.tokens_per_expert.data(), counts.dropped, counts.rerouted, counts.degraded_tokens,
                       counts.degraded_per_expert.empty() ? nullptr : counts.degraded_per_expert.data());
    stats->record_adaptive(layer, counts.adaptive_tokens, counts.adaptive_dropped, counts.requeued);
  });
  if (impl->comm != nullptr && !impl->tensor_parallel()) {
    RebalanceInputs in{.comm = impl->comm,
                       .config = &impl->config,
                       .load_stats = impl->load_stats.get(),
                       .ep = &impl->ep,
                       .layers = &impl->weights.layers,
                       .expert_store = &impl->expert_store};
    in.options.slots_per_rank = options.slots_per_rank;
    in.options.replica_cap = options.replica_cap;
    in.options.min_replicas = options.min_replicas;
    in.options.min_gain = options.rebalance_min_gain;
    impl->rebalancer = std::make_unique<Rebalancer>(in);
    impl->failover = std::make_unique<Failover>(make_failover_inputs(options, impl.get()));
  }
  impl->session = std::make_unique<EpSession>(impl->comm, impl.get(), &system_clock(),
                                              EpSessionOptions{.rebalance_every = options.rebalance_every,
                                                               .steady_timeout_seconds = options.comm_timeout_seconds,
                                                               .reform_join_seconds = options.failover_join_seconds});
  if (impl->comm != nullptr && impl->comm->rank() == 0 && options.comm_timeout_seconds > 0) {
    impl->comm->set_timeout_seconds(options.comm_timeout_seconds);  // start-up is over for rank 0
  }
  // The TP / EP sub-groups talk only inside steps (after rank 0's first header): every
  // rank switches them now.
  set_group_timeouts(impl.get(), options.comm_timeout_seconds);
  if (impl->comm != nullptr && impl->comm->rank() == 0) {
    EpSession* session = impl->session.get();
    impl->decoder->set_chunk_hook([session](int64_t m) { return session->announce_step(m); });
  }
  impl->info = make_info(dir, impl->config, impl->weights, *impl->source);
  MOE_LOG_INFO("loaded {} ({}): {} layers, {} experts (top-{}), {:.2f}M parameters ({:.2f}M active), {:.1f} MB",
               dir, impl->config.model_type, impl->config.num_hidden_layers, impl->config.router.num_experts,
               impl->config.router.top_k, impl->info.num_parameters / 1e6, impl->info.num_active_parameters / 1e6,
               impl->info.weight_bytes / 1e6);
  impl->core = EngineCore{.config = &impl->run_config(),
                          .info = &impl->info,
                          .tokenizer = impl->tokenizer.get(),
                          .decoder = impl->decoder.get(),
                          .load_stats = impl->load_stats.get(),
                          .session = impl->session.get(),
                          .failover = impl->failover.get(),
                          .kv_dtype = impl->kv_dtype,
                          .dp_groups = impl->decoder->dp_groups()};
  impl->core.model_fingerprint = model_fingerprint(*impl->source, impl->weights);
  impl->core.kv_cache_key = kv_cache_key(impl->core.model_fingerprint, options);
  impl->core.world_ranks = impl->comm != nullptr ? impl->comm->size() : 1;
  impl->core.tp_size = impl->groups.tp_size;
  phases.mark("other");
  MOE_LOG_INFO("start-up: {}", phases.summary());
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

}  // namespace moe
