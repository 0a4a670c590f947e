// Engine::Impl: what a loaded Engine owns. Internal to src/moe/engine (engine_open.cc
// builds it, engine.cc runs it); the Scheduler sees only EngineCore (engine_core.h).
#pragma once

#include <memory>
#include <vector>

#include "moe/comm/communicator.h"
#include "moe/engine.h"
#include "moe/engine/engine_core.h"
#include "moe/model/config.h"
#include "moe/model/model_source.h"
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
  // Expert parallelism (comm == nullptr: single process).
  Communicator* comm = nullptr;
  std::vector<EpContext> ep;             // [num_layers] expert placement (dense layers: unused)
  ExpertStore expert_store;              // experts received by live rebalancing (or dequantised: fp8_mode)
  std::vector<std::vector<uint8_t>> fp8_dequantized;  // bf16 copies of non-expert FP8 matrices (Fp8Mode::kDequant)
  std::unique_ptr<Rebalancer> rebalancer;  // under EP only
  std::unique_ptr<Failover> failover;      // under EP only (used when the communicator can re-form)
  std::unique_ptr<EpSession> session;
  EngineCore core;

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  Status join_step() override { return decoder->forward_chunk(nullptr, 0, 0, nullptr, nullptr); }
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

}  // namespace moe
