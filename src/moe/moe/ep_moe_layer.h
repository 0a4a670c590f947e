// The MoE block under expert parallelism (EP): experts are sharded over the ranks of a
// Communicator; every rank routes its own tokens (attention is data-parallel, a rank
// may have zero tokens and still joins every exchange), then
//   layout -> counts all-to-all -> dispatch alltoallv (one row per (token, rank), with
//   the token's expert ids and weights for that rank) -> local grouped expert FFN with
//   the weighted sum over the rank's experts -> combine alltoallv back -> sum over ranks.
// With overlap, the tokens are split into N micro-batches (EpOptions::micro_batches) and
// pipelined: micro-batch i's expert compute runs while i+1's dispatch and i-1's combine
// are in flight (nonblocking alltoallv, polled between groups of experts), so at most
// the first dispatch and the last combine are exposed: up to 1 - 1/N of the exchange
// time hidden when expert compute is at least the exchange time. The hierarchical
// exchange pipelines the same way (ep_hierarchical.h).
//
// Result equals moe_forward up to f32 summation order (partial sums per rank).
//
// Hybrid TP x EP (MixServe, EpContext::expert_tp): every expert's intermediate dim is
// split over a node-local group (the TP group; weights sharded, config with
// moe_intermediate_size / tp). After the dispatch exchange, the rows received by the
// ranks of the TP group (with their expert ids and weights) are all-gathered inside it,
// each rank computes its partial expert FFN for all of them, and a reduce-scatter
// returns to each rank the full result for the rows it received; the combine is then
// as without TP. Both node-local exchanges are ialltoallv on expert_tp (variable row
// counts), so with two micro-batches they overlap the other micro-batch's cross-node
// dispatch/combine. Flat exchange only (with one EP rank per node the hierarchical
// exchange has nothing to forward): hierarchical + expert_tp is FailedPrecondition.
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
#include "moe/trace/trace_recorder.h"

namespace moe {

struct EpOptions {
  bool a2a_bf16 = false;  // send activations as bf16 (half the bytes; not bit-equal to 1 rank)
  bool overlap = false;   // micro-batches, communication overlapped with expert compute
  // With overlap: the number of micro-batches, 2..kMaxEpMicroBatches; 0 = auto: from the
  // group's mean tokens per rank (one int64 all-reduce per call), about 64 tokens per
  // micro-batch, at least 2. Forced to 2 with expert_tp (the hybrid's node-local stages).
  // Another value: InvalidArgument.
  int micro_batches = 0;
  // Two-level all-to-all over the communicator's nodes (ep_hierarchical.h): a token
  // crosses to a remote node once, then is forwarded inside it. With overlap its
  // micro-batches are pipelined too (each a chain of five nonblocking exchanges).
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
  // Hybrid: the node-local group (not owned) over which each expert's intermediate dim
  // is split; null = experts whole (every rank of `comm` computes full results). Every
  // rank of expert_tp must be in a different EP group `comm` with the same placement,
  // and call ep_moe_forward in the same order. Weights: this rank's shard of w1/w3 rows
  // and w2 columns; args.config with moe_intermediate_size / expert_tp->size().
  Communicator* expert_tp = nullptr;
};

// Time spent, summed over calls (seconds), for the overlap report.
struct EpTimings {
  double comm_wait_seconds = 0;   // blocked waiting for exchanges
  double compute_seconds = 0;     // expert FFN
  double exchange_seconds = 0;    // total time of dispatch+combine exchanges, start to finish
  int64_t calls = 0;
  int64_t bytes_sent = 0;
  // The fraction of the exchanges' time hidden behind other work: 1 - comm_wait /
  // exchange (0 with blocking exchanges, which are waited on at once; 0 when no
  // exchange ran), clamped to [0, 1].
  double comm_overlap_ratio() const;
  // Per-link traffic of the flat exchange (dispatch + combine), summed over calls:
  // [comm size] bytes this rank sent to / received from each rank of ctx.comm (its own
  // index: rows it kept, a local copy). Sized on the first call; sum(bytes_to_rank) ==
  // bytes_sent. The hierarchical exchange counts both of its stages here.
  std::vector<int64_t> bytes_to_rank, bytes_from_rank;
  // Per-step spans (router, dispatch, waits, expert compute, combine) and per-link bytes
  // go here when set (not owned; null = tracing off).
  TraceRecorder* trace = nullptr;
};

// The most micro-batches EpOptions::micro_batches takes.
inline constexpr int kMaxEpMicroBatches = 8;

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

// The routing step of ep_moe_forward alone (router, node limit, degraded mode, capacity
// over ctx.comm; collective on ctx.comm): the view points into ws and stays valid until
// the next routing on ws. Same errors as ep_moe_forward's routing.
StatusOr<TopkRoutingView> ep_route_tokens(const MoeLayerArgs& args, const EpContext& ctx, EpWorkspace* ws);

// Stage-wise ep_moe_forward_routed of one micro-batch, for callers that interleave
// micro-batches with their own collectives (MoeBlock::forward_fused): begin, then step
// until it returns true. Each step waits for the micro-batch's exchange in flight, runs
// the next local stage and issues the next exchange (nonblocking; small counts
// exchanges are blocking). `slot` (0 or 1) selects the workspace's micro-batch buffers:
// two micro-batches in flight need different slots. args' buffers must stay valid until
// done; args.out is complete only then. Every rank of ctx.comm (and of expert_tp) must
// issue the same begin/step sequence. Flat exchange only (hierarchical:
// FailedPrecondition). After an error the slot is idle; begin abandons a micro-batch an
// error in the caller left in flight.
struct EpStageCall {
  const EpContext* ctx = nullptr;
  EpWorkspace* ws = nullptr;
  int slot = 0;
  EpTimings* timings = nullptr;  // optional, accumulates
};
Status ep_moe_begin(const MoeLayerArgs& args, const TopkRoutingView& routing, const EpStageCall& call);
StatusOr<bool> ep_moe_step(const EpStageCall& call);

}  // namespace moe
