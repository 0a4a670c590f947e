// Engine::Impl: what a loaded Engine owns. Internal to src/moe/engine (engine_open.cc
// builds it, engine.cc runs it); the Scheduler sees only EngineCore (engine_core.h).
#pragma once

#include <memory>
#include <vector>

#include "moe/comm/communicator.h"
#include "moe/comm/parallel_groups.h"
#include "moe/engine.h"
#include "moe/engine/engine_core.h"
#include "moe/core/huge_page_arena.h"
#include "moe/engine/kernel_choice.h"
#include "moe/model/config.h"
#include "moe/model/model_source.h"
#include "moe/model/tp_shard.h"
#include "moe/model/tokenizer.h"
#include "moe/model/weights.h"
#include "moe/moe/capacity.h"
#include "moe/moe/ep_moe_layer.h"
#include "moe/runtime/ep_session.h"
#include "moe/runtime/expert_migration.h"
#include "moe/runtime/failover.h"
#include "moe/runtime/rebalancer.h"
#include "moe/stats/expert_load_stats.h"
#include "moe/store/store_model.h"
#include "moe/transformer/decoder.h"
#include "moe/transformer/kv_cache.h"
#include "moe/transformer/paged_kv_cache.h"
#include "moe/trace/trace_recorder.h"

namespace moe {

// The Impl is also the EP session's step runner: workers join a step through the
// decoder and rebalance through the rebalancer. Not movable (the session, the hooks
// and `core` point into it).
struct Engine::Impl final : EpStepRunner {
  // The model.
  ModelConfig config;
  std::unique_ptr<ModelSource> source;  // where the weights live (HF dir or restored store)
  StoreModel* store = nullptr;           // `source` when it is a store, else null
  std::vector<MissingExpert> missing_experts;  // held here, no good local copy (EP: peers supply them)
  ModelWeights weights;
  std::unique_ptr<Tokenizer> tokenizer;
  ModelInfo info;
  std::unique_ptr<Decoder> decoder;
  std::unique_ptr<ExpertLoadStats> load_stats;
  CapacityOptions capacity;
  DType kv_dtype = DType::kF32;  // EngineOptions::kv_dtype, checked
  // Expert parallelism (comm == nullptr: single process). `comm` is the world (the EP
  // session's headers, start-up agreement); experts are sharded over ep_comm: the world
  // without TP, the EP group with it (null under pure TP: every rank holds every expert).
  Communicator* comm = nullptr;
  Communicator* ep_comm = nullptr;
  std::vector<EpContext> ep;             // [num_layers] expert placement (dense layers: unused)
  // Tensor parallelism (groups.tp_size > 1, engine_tp.h): the decoder runs on the local
  // config (heads and intermediate sizes / tp) and this rank's shard of `weights`.
  ParallelGroups groups;
  ModelConfig local_config;  // == config without TP
  ModelWeights tp_weights;   // views into `weights` and copies in tp_storage (TP only)
  TpWeightStorage tp_storage;
  // Ranks 1.. of the driver's TP group (EP rank 0) mirror each step of rank 0 on their
  // own KV caches (Decoder::tp_follow), made and resized here with the local KV shape.
  bool tp_follower = false;
  // DP-attention (EngineOptions::dp_attention): the leaders of the other TP groups run
  // their share of each step (Decoder::dp_follow) on their own paged cache (follower_paged).
  bool dp_follower = false;
  std::unique_ptr<KVCache> follower_kv;
  std::unique_ptr<PagedKVCache> follower_paged;
  TpFollowerCaches follower_caches;  // over the two above (engine_tp.cc: make_follower_caches)
  ExpertStore expert_store;              // experts received by live rebalancing (or dequantised: fp8_mode)
  std::vector<std::vector<uint8_t>> fp8_dequantized;  // bf16 copies of non-expert FP8 matrices (Fp8Mode::kDequant)
  std::vector<std::vector<uint8_t>> int8_quantized;   // int8 copies of non-expert matrices (--weights int8)
  // The decoder's matrices copied into huge pages (EngineOptions::hugepages); then
  // fp8_dequantized, int8_quantized and the start-up entries of expert_store are freed.
  std::unique_ptr<HugePageArena> weight_arena;
  KernelChoice kernel_choice;                          // EngineOptions::kernels / weights, checked
  std::unique_ptr<Rebalancer> rebalancer;  // under EP only
  std::unique_ptr<Failover> failover;      // under EP only (used when the communicator can re-form)
  std::unique_ptr<EpSession> session;
  std::unique_ptr<TraceRecorder> trace;  // EngineOptions::trace_path set; the decoder records into it
  std::string trace_path;
  EngineCore core;

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  bool tensor_parallel() const { return groups.tp_size > 1; }
  // What the decoder runs on: the local config and sharded weights under TP, else the
  // model's own (live rebalancing and failover change `weights` in place).
  const ModelConfig& run_config() const { return tensor_parallel() ? local_config : config; }
  const ModelWeights& run_weights() const { return tensor_parallel() ? tp_weights : weights; }

  // A TP follower mirrors rank 0's forward pass; every other worker joins the MoE
  // exchanges (and, in hybrid, its TP group's collectives) with no tokens.
  Status join_step() override {
    if (dp_follower) return decoder->dp_follow(follower_caches);
    if (tp_follower) return decoder->tp_follow(follower_caches);
    return decoder->forward_chunk(nullptr, 0, 0, nullptr, nullptr);
  }

  // No live rebalancing while experts are lost or being re-replicated (the planner
  // places every expert; identical decision on every rank).
  Status rebalance() override {
    if (failover && (failover->pending() || failover->degraded())) return ok_status();
    return rebalancer ? rebalancer->rebalance() : ok_status();
  }
  Status on_group_shrunk(const std::vector<int>& kept) override {
    return failover ? failover->on_group_shrunk(kept) : EpStepRunner::on_group_shrunk(kept);
  }
  bool replicas_pending() const override { return failover && failover->pending(); }
  Status switch_replicas_if_ready() override { return failover ? failover->switch_if_ready() : ok_status(); }
};

// What Engine::info() reports (engine.cc): sizes from the config, parameter counts from
// the source's tensors, bytes per decode token from the bound weights `w`.
ModelInfo make_info(const std::string& dir, const ModelConfig& c, const ModelWeights& w, const ModelSource& source);

}  // namespace moe
