// Expert capacity and token dropping (GShard, Lepikhin et al. 2020; Switch
// Transformer, Fedus et al. 2021), over the global batch of an EP group.
//
// capacity = ceil(global_tokens * top_k * capacity_factor / num_experts) assignments
// per expert, where global_tokens is the step's token count summed over every rank
// (from exchanged counts, so every rank computes the same capacity). Assignments are
// admitted in global token order: rank-major (all of rank 0's tokens, then rank 1's
// ...), token index within a rank; a token holds each expert once, so its slots never
// compete. The result therefore does not depend on how a batch is split over ranks.
//
// Overflow policies:
//   kDropless (default): no capacity; every assignment runs (grouped_expert_ffn bounds
//     memory by processing large expert batches in chunks).
//   kDrop: an assignment beyond its expert's capacity is skipped (expert id set to
//     kDroppedExpert = -1, weight 0). The token keeps its residual path and its other
//     experts; the remaining weights are NOT renormalised.
//   kReroute: an assignment beyond capacity moves to the token's next-best expert (in
//     router selection order, among experts its group/node limits allow and it does
//     not already hold) that still has room after every admitted assignment; it keeps
//     its weight. Overflowing assignments are placed one by one in global token order,
//     then slot order. With no expert left with room it is dropped.
//   kAdaptiveRequeue (the seed's token_drop_policy "adaptive_requeue"): round 1 admits
//     as kDrop. The overflowing assignments then get a second round within the same
//     step, on their OWN expert (same expert, same weight: the token's output is the
//     dropless one), in global token order then slot order, while (a) the step still
//     has room: the round-1 capacity the other experts left unused,
//     sum_e (capacity - admitted_e), taken one assignment at a time, and (b) the
//     expert has taken fewer than `capacity` in round 2 (a second round of the same
//     size). So the step's expert work stays within num_experts * capacity, as under
//     kDrop, but a hot expert borrows the room of cold ones (under EP the work runs
//     wherever the expert or the replica replica_choice picks lives: the bound is on
//     the step's total, not per rank). What is left is dropped as under kDrop. The
//     rounds decide admission only: admitted assignments run in one grouped pass.
//
// Adaptive top-k (adaptive_k.h; CapacityOptions::adaptive) runs first: cap to max_k,
// then shed lower-ranked experts of overloaded experts; the policy then sees the
// reduced routing and computes its capacity with max_k in place of top_k.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moe/comm/communicator.h"
#include "moe/moe/adaptive_k.h"
#include "moe/moe/topk_routing.h"
#include "moe/status.h"

namespace moe {

enum class OverflowPolicy { kDropless, kDrop, kReroute, kAdaptiveRequeue };

struct CapacityOptions {
  OverflowPolicy policy = OverflowPolicy::kDropless;
  double capacity_factor = 1.0;  // > 0; ignored by kDropless
  AdaptiveKOptions adaptive{};   // off by default; validate_adaptive_k
};

// "dropless", "drop", "reroute" or "adaptive_requeue"; InvalidArgument naming the value
// otherwise.
StatusOr<OverflowPolicy> parse_overflow_policy(const std::string& name);
const char* overflow_policy_name(OverflowPolicy policy);
// InvalidArgument unless capacity_factor is finite and > 0 (for drop/reroute).
Status validate_capacity_options(const CapacityOptions& options);

// ceil(global_tokens * top_k * factor / num_experts), clamped to [0, global_tokens]
// (an expert receives at most one assignment per token).
int64_t expert_capacity(int64_t global_tokens, int top_k, int num_experts, double factor);

// One step's global routing outcome (identical on every rank).
struct StepRoutingCounts {
  std::vector<int64_t> tokens_per_expert;  // [num_experts] assignments run, after the policy
  int64_t global_tokens = 0;
  int64_t capacity = -1;  // -1 when dropless
  int64_t dropped = 0;    // assignments skipped
  int64_t rerouted = 0;   // assignments moved to another expert
  int64_t requeued = 0;   // kAdaptiveRequeue: assignments run in the second round
  // Adaptive k: the load target (-1 when off), tokens that shed at least one expert
  // under load, assignments shed (the max_k cap is not counted: it is static).
  int64_t adaptive_target = -1;
  int64_t adaptive_tokens = 0;
  int64_t adaptive_dropped = 0;
  // Degraded mode (router.h): tokens whose all-alive top-k held a dead (lost) expert,
  // and per expert how many of them wanted it ([num_experts], 0 for live experts).
  int64_t degraded_tokens = 0;
  std::vector<int64_t> degraded_per_expert;
};

// Applies `options` to this rank's routing in place and fills `counts`. Degraded counts
// are in-out: on entry counts->degraded_tokens / degraded_per_expert hold this rank's
// router counts (RouterDegradedCounts; an empty degraded_per_expert = none), on return
// their sums over the group.
//   routing: topk_idx, topk_weights [num_tokens, num_topk] (router output, best first),
//            rewritten in place; routing.ranked [num_tokens, num_experts] (route_topk's
//            selection order, -1 padded) is required for kReroute, else may be null.
//            Adaptive k needs options.adaptive validated against routing.num_topk.
//   comm:    the EP group (collective: every rank calls it, with its own tokens, possibly
//            none), or nullptr for a single process.
// Errors: communication errors from comm.
Status apply_capacity(const CapacityOptions& options, Communicator* comm, int num_experts, const TopkRouting& routing,
                      StepRoutingCounts* counts);

}  // namespace moe
