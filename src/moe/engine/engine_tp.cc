// Tensor parallelism in the Engine (engine_tp.h).
#include "moe/engine/engine_tp.h"

#include <string>

#include "moe/comm/parallel_groups.h"
#include "moe/core/logging.h"
#include "moe/engine/engine_impl.h"
#include "moe/model/tp_shard.h"

namespace moe {

Status check_dp_attention(const EngineOptions& options) {
  if (!options.dp_attention) return ok_status();
  const std::string flag = "--dp-attention on";
  Communicator* world = options.comm;
  const int tp = std::max(options.tp_size, 1);
  if (world == nullptr) {
    return invalid_argument(flag + " needs expert parallelism over several groups: run it under mpirun with --ep > 1");
  }
  const int ep = options.ep_size > 0 ? options.ep_size : world->size() / tp;
  if (ep < 2) {
    return invalid_argument(flag + " needs --ep > 1 (got --ep " + std::to_string(ep) +
                            "): with one group there is no other attention replica");
  }
  if (options.rebalance_every > 0) return invalid_argument("--rebalance-every is not supported with " + flag);
  if (world->can_reform()) {
    return invalid_argument(flag + " with --comm-backend " + world->backend() +
                            ": failover cannot re-form the DP-attention groups; use --comm-backend mpi");
  }
  return ok_status();
}

Status open_parallel_groups(const EngineOptions& options, Engine::Impl* impl) {
  const int tp = options.tp_size;
  if (tp < 1) return invalid_argument("--tp must be >= 1 (got " + std::to_string(tp) + ")");
  if (options.ep_size < 0) return invalid_argument("--ep must be >= 1 (got " + std::to_string(options.ep_size) + ")");
  Communicator* world = impl->comm;
  MOE_RETURN_IF_ERROR(check_dp_attention(options));
  if (tp == 1) {
    // Expert parallelism alone: the EP group is the world (as before tensor parallelism).
    if (world != nullptr && options.ep_size > 0 && options.ep_size != world->size()) {
      return invalid_argument("--ep " + std::to_string(options.ep_size) + " but the group has " +
                              std::to_string(world->size()) + " ranks; they must match");
    }
    impl->ep_comm = world;
    return ok_status();
  }
  const std::string flag = "--tp " + std::to_string(tp);
  if (world == nullptr) {
    return invalid_argument(flag + " needs " + std::to_string(tp) + " ranks: run it under mpirun -np " +
                            std::to_string(tp * std::max(options.ep_size, 1)));
  }
  // What would diverge between the ranks of a TP group (they must hold the same experts,
  // each a slice of them) or could not re-form after a failure is refused by name.
  if (options.rebalance_every > 0) {
    return invalid_argument("--rebalance-every is not supported with " + flag + " (experts are TP-sharded)");
  }
  if (options.min_replicas > 1) {
    return invalid_argument("--min-replicas > 1 is not supported with " + flag + " (experts are TP-sharded)");
  }
  if (!options.placement_file.empty()) {
    return invalid_argument("--placement is not supported with " + flag + " (contiguous placement only)");
  }
  if (world->can_reform()) {
    return invalid_argument(flag + " with --comm-backend " + world->backend() +
                            ": failover cannot re-form tensor-parallel groups; use --comm-backend mpi");
  }
  const int ep = options.ep_size > 0 ? options.ep_size : world->size() / tp;
  MOE_ASSIGN_OR_RETURN(impl->groups, make_parallel_groups(*world, tp, ep));
  impl->ep_comm = impl->groups.ep;
  MOE_LOG_INFO("parallel groups: --tp {} x --ep {} on {} ranks; this rank: tp rank {}, ep rank {}", tp, ep,
               world->size(), impl->groups.tp_rank, impl->groups.ep_rank);
  return ok_status();
}

Status shard_weights(Engine::Impl* impl) {
  const ParallelGroups& g = impl->groups;
  impl->local_config = impl->config;
  if (g.tp_size == 1) return ok_status();
  impl->local_config = tp_local_config(impl->config, g.tp_size);
  MOE_ASSIGN_OR_RETURN(impl->tp_weights,
                       shard_weights_for_tp(impl->config, impl->weights, g.tp_rank, g.tp_size, &impl->tp_storage));
  return ok_status();
}

void set_group_timeouts(Engine::Impl* impl, double seconds) {
  if (seconds <= 0) return;
  for (Communicator* c : {impl->groups.owned_tp.get(), impl->groups.owned_ep.get()}) {
    if (c != nullptr) c->set_timeout_seconds(seconds);
  }
}

void make_follower_caches(Engine::Impl* impl) {
  impl->follower_caches.contiguous = [impl](int64_t capacity) -> KVCache* {
    // generate() sizes its cache per request (prompt + max_tokens): reuse it while the
    // capacity matches (positions are rewritten from 0), else make one of that size.
    if (impl->follower_kv == nullptr || impl->follower_kv->capacity() != capacity) {
      impl->follower_kv.reset();
      const KvCacheShape kv = kv_cache_shape(impl->local_config, impl->kv_dtype);
      impl->follower_kv = std::make_unique<KVCache>(impl->local_config.num_hidden_layers, kv, capacity);
    }
    return impl->follower_kv.get();
  };
  impl->follower_caches.paged = [impl](int64_t block_size, int64_t num_blocks) -> PagedKVCache* {
    // The scheduler's pool: made once (the driver's geometry is fixed for its life).
    PagedKVCache* p = impl->follower_paged.get();
    if (p == nullptr || p->block_size() != block_size || p->num_blocks() != num_blocks) {
      impl->follower_paged.reset();
      impl->follower_paged = std::make_unique<PagedKVCache>(impl->local_config.num_hidden_layers,
                                                            kv_cache_shape(impl->local_config, impl->kv_dtype),
                                                            static_cast<int>(block_size), num_blocks);
    }
    return impl->follower_paged.get();
  };
}

}  // namespace moe
