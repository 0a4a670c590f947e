// The MoE block under expert parallelism (EP): experts are sharded over the ranks of a
// Communicator; every rank routes its own tokens (attention is data-parallel, a rank
// may have zero tokens and still joins every exchange), then
//   layout -> counts all-to-all -> dispatch alltoallv (one row per (token, rank), with
//   the token's expert ids and weights for that rank) -> local grouped expert FFN with
//   the weighted sum over the rank's experts -> combine alltoallv back -> sum over ranks.
// With overlap, the tokens are split into two micro-batches and one's expert compute
// runs while the other's dispatch or combine is in flight (nonblocking alltoallv).
//
// Result equals moe_forward up to f32 summation order (partial sums per rank).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "moe/comm/communicator.h"
#include "moe/model/config.h"
#include "moe/model/weights.h"
#include "moe/moe/capacity.h"
#include "moe/moe/dispatch_layout.h"
#include "moe/moe/moe_layer.h"
#include "moe/moe/moe_layer_args.h"
#include "moe/moe/topk_routing.h"
#include "moe/placement/expert_placement.h"
#include "moe/status.h"

namespace moe {

struct EpOptions {
  bool a2a_bf16 = false;  // send activations as bf16 (half the bytes; not bit-equal to 1 rank)
  bool overlap = false;   // two micro-batches, communication overlapped with expert compute
  // Two-level all-to-all over the communicator's nodes (ep_hierarchical.h): a token
  // crosses to a remote node once, then is forwarded inside it. Blocking exchanges
  // (overlap is not applied in this mode).
  bool hierarchical = false;
  // Node-limited routing (DeepSeek-V3 report, sec. 2.1.2): 0 = off; M > 0 restricts
  // each token to experts on at most M nodes (route_node_limited in router.h).
  int max_nodes_per_token = 0;
  // Expert capacity over the EP group's global batch and the overflow policy
  // (capacity.h); identical results for any number of ranks.
  CapacityOptions capacity;
};

// The EP plan of one MoE layer: plain data, copyable. The engine keeps one per layer
// (placements differ per layer once rebalanced); the mutable per-caller state, the
// EpWorkspace and the EpTimings, is passed beside it so that one context can serve
// several decoders and one workspace every layer.
// A placement with lost experts (ExpertPlacement::is_lost) runs the layer in degraded
// mode: the router never selects a lost expert (router.h) and the step's routing counts
// report the degraded tokens.
struct EpContext {
  Communicator* comm = nullptr;  // not owned
  ExpertPlacement placement;
  EpOptions options;
  int layer_id = -1;  // the model layer this context serves, for error messages (-1: unknown)
};

// Time spent, summed over calls (seconds), for the overlap report.
struct EpTimings {
  double comm_wait_seconds = 0;   // blocked waiting for exchanges
  double compute_seconds = 0;     // expert FFN
  double exchange_seconds = 0;    // total time of dispatch+combine exchanges, start to finish
  int64_t calls = 0;
  int64_t bytes_sent = 0;
};

struct EpWorkspace;  // defined in ep_moe_layer.cc
struct EpWorkspaceDeleter {
  void operator()(EpWorkspace* ws) const;
};
using EpWorkspacePtr = std::unique_ptr<EpWorkspace, EpWorkspaceDeleter>;
// Buffers for ep_moe_forward calls of up to max_tokens tokens per rank with `config`'s
// MoE layers over ctx's group and options, sized here once (the flat exchange's
// buffers, for up to ctx.comm->size() * max_tokens received rows; the hierarchical
// exchange's buffers grow on their first steps). A larger call still works: the buffers
// grow, as a fallback. `kernel`: how the router and expert projections run. Not
// thread-safe: one workspace per caller thread.
EpWorkspacePtr make_ep_workspace(const ModelConfig& config, const EpContext& ctx, int64_t max_tokens,
                                 const KernelOptions& kernel = {});

// args.x: [num_tokens, hidden] f32; args.out: [num_tokens, hidden] f32, overwritten
// (num_tokens may be 0, with null data). Collective: every rank of ctx.comm must call
// it, in the same layer order. Errors: InvalidArgument for a bad routing
// (duplicate/out-of-range/lost expert), FailedPrecondition (on every rank, before any
// exchange) when the placement has fewer live experts than top_k, communication errors
// as returned by the communicator (DeadlineExceeded for a missing peer). timings
// (optional) accumulates.
Status ep_moe_forward(const MoeLayerArgs& args, const EpContext& ctx, EpWorkspace* ws, EpTimings* timings = nullptr);

// The global routing counts of the last ep_moe_forward on this workspace (identical
// on every rank): for load statistics.
const StepRoutingCounts& ep_last_routing_counts(const EpWorkspace& ws);

// The same, from a given routing (topk_idx/topk_weights: [num_tokens, top_k]); used by
// tests and benchmarks to feed hand-made or skewed routings.
Status ep_moe_forward_routed(const MoeLayerArgs& args, const TopkRoutingView& routing, const EpContext& ctx,
                             EpWorkspace* ws, EpTimings* timings = nullptr);

}  // namespace moe
