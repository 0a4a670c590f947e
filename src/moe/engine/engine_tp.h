// Tensor parallelism in the Engine: the TP/EP groups of the world, the
// options that TP excludes, the per-rank shard of the weights the decoder runs on, and
// the mirror KV caches of a TP follower. Internal to src/moe/engine (engine_open.cc).
#pragma once

#include "moe/engine.h"
#include "moe/engine_options.h"
#include "moe/status.h"

namespace moe {

// Collective over options.comm when tp_size > 1 (every rank with the same options):
// checks tp_size / ep_size against the world, refuses what TP does not support, and
// builds impl->groups (make_parallel_groups) and impl->ep_comm (the communicator experts
// are sharded over: the world without TP, the EP group with it, null for pure TP).
// Errors (InvalidArgument, the same on every rank, naming the flag): tp_size < 1,
// tp_size > 1 without a communicator, ep_size < 0, tp x ep != world size, a TP group
// spanning nodes, --rebalance-every / --min-replicas > 1 / --placement under TP;
// FailedPrecondition for a backend that cannot split (e.g. gloo).
Status open_parallel_groups(const EngineOptions& options, Engine::Impl* impl);

// EngineOptions::dp_attention's requirements (InvalidArgument naming --dp-attention):
// a communicator, --ep > 1, no --rebalance-every, a backend that does not re-form.
// open_parallel_groups checks it first.
Status check_dp_attention(const EngineOptions& options);

// After the weights are bound (and FP8 dequantised): impl->local_config and
// impl->tp_weights (this rank's shard, model/tp_shard.h). Without TP a copy of config and
// weights. Errors: the sharding's (InvalidArgument naming the tensor / field).
Status shard_weights(Engine::Impl* impl);

// A TP follower's mirror caches (impl->follower_caches): contiguous and paged KV caches
// of the local config's shape, made on first use and re-made when the driver's geometry
// changes. impl must outlive them.
void make_follower_caches(Engine::Impl* impl);

// Sets the sub-communicators' (TP and EP groups split from the world) deadline.
void set_group_timeouts(Engine::Impl* impl, double seconds);

}  // namespace moe
