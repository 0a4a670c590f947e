// Loads one routed expert from a checkpoint store onto this rank: for failover (a rank
// takes over the experts of a lost one) and rebalancing (a new replica), without a peer
// to copy it from and without reading the whole model.
#pragma once

#include "moe/model/config.h"
#include "moe/runtime/expert_migration.h"
#include "moe/status.h"
#include "moe/store/store_model.h"

namespace moe {

// Reads expert (layer, expert)'s shard from `store` (StoreModel::read_expert: hash
// verified, falling back to the HF checkpoint it came from), checks its w1/w2/w3
// (weight_names.h) against `config` (shapes [inter, hidden] / [hidden, inter] /
// [inter, hidden], dtype F32/BF16/F16), moves the shard's bytes into
// (*target.store)[{layer, expert}] (replacing any previous copy) and points
// (*target.layers)[layer].experts[expert] at them with loaded = true. The placement is
// the caller's: this only makes the weights present.
// Errors (nothing changes on any): InvalidArgument naming the layer and expert if the
// layer is not an MoE layer of `config`, the expert is out of range, or a tensor has
// another shape or dtype; NotFound if the store has no such expert or tensor;
// DataLoss/NotFound (store_reader.h) if no copy of the shard is good.
// Not thread-safe with a forward pass over `target.layers`: call between steps.
Status load_expert_from_store(const StoreModel& store, const ModelConfig& config, int layer, int expert,
                              const MigrationTarget& target);

}  // namespace moe
