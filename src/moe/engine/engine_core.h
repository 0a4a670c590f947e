// EngineCore: the parts of a loaded Engine that the Scheduler drives directly for
// batched steps (its decoder, tokenizer, config, load statistics and EP session).
// Internal to src/moe/engine: the Engine owns everything pointed to; valid for the
// Engine's lifetime. Used by the one thread that runs steps (Scheduler::count_tokens
// also encodes with the const tokenizer from other threads).
#pragma once

#include <cstdint>
#include <string>

#include "moe/engine.h"
#include "moe/model/config.h"
#include "moe/model/tokenizer.h"
#include "moe/runtime/ep_session.h"
#include "moe/runtime/failover.h"
#include "moe/stats/expert_load_stats.h"
#include "moe/transformer/decoder.h"

namespace moe {

struct EngineCore {
  // The config the decoder runs on: under tensor parallelism the local one (heads and
  // intermediate sizes / tp: the KV cache shape per rank); vocab, layers, context and
  // router are the model's.
  const ModelConfig* config = nullptr;
  const ModelInfo* info = nullptr;
  const Tokenizer* tokenizer = nullptr;
  Decoder* decoder = nullptr;
  const ExpertLoadStats* load_stats = nullptr;
  EpSession* session = nullptr;  // every step goes through it (EP headers, rebalance trigger)
  const Failover* failover = nullptr;  // under EP: lost experts after a failover (else null)
  DType kv_dtype = DType::kF32;        // the KV caches' element type (EngineOptions::kv_dtype)
  // DP-attention: the number of attention groups the scheduler assigns sequences to
  // (Decoder::BatchSegment::dp_group); 1 without it.
  int dp_groups = 1;
  // Everything besides the tokens that decides a prefix's KV: the model's fingerprint and
  // the options that change the numbers (KV dtype, weight format, kernels, precision,
  // routing policy, TP size). The prefix cache's keys derive from it, so a cache (or a
  // disk tier) never serves KV computed another way.
  std::string kv_cache_key;
  int world_ranks = 1;  // ranks of the engine's world (EP x TP); 1 in one process
  int tp_size = 1;      // tensor parallelism: the KV heads are split over this many ranks
  uint64_t model_fingerprint = 0;
};

}  // namespace moe
