// Hierarchical (two-level) dispatch and combine for expert parallelism across nodes.
//
// Flat dispatch sends a token once per destination RANK; when several of a token's
// experts sit on ranks of the same remote node, that token crosses the slow inter-node
// link several times. Here it crosses once per destination NODE:
//   stage 1 (inter-node): one row per (token, remote node) to the sender's "gateway" on
//            that node, the rank with the same local index (as DeepEP's RDMA->NVLink
//            forwarding), carrying the token's expert ids for the whole node;
//   stage 2 (intra-node): the gateway (or the sender itself, for its own node) forwards
//            the row to each rank of its node holding some of those experts.
// Combine runs the stages backwards, the gateway summing its node's partial results
// first, so the inter-node link again carries one row per (token, node).
// Each stage is one alltoallv over the whole group (zero counts for non-peers), so the
// same code runs on MPI and in-process communicators.
#pragma once

#include <cstdint>
#include <memory>

#include "moe/moe/ep_moe_layer.h"
#include "moe/moe/expert_ffn.h"

namespace moe {

// Buffers of the hierarchical exchange, reused across layers and steps. They grow on
// the first steps and are then reused: the rows a rank forwards as a gateway or receives
// in stage 2 depend on every rank's routing (up to num_ranks^2 * max_tokens rows), too
// loose a bound to allocate up front.
struct HierWorkspace;
struct HierWorkspaceDeleter {
  void operator()(HierWorkspace* ws) const;
};
// `kernel`: how its expert projections run.
std::unique_ptr<HierWorkspace, HierWorkspaceDeleter> make_hier_workspace(const KernelOptions& kernel = {});

// Same contract as ep_moe_forward_routed (args.out [num_tokens, hidden] overwritten;
// collective; a bad routing fails every rank together). Blocking exchanges; with
// ctx.options.overlap, N micro-batches (EpOptions::micro_batches) pipelined over
// nonblocking exchanges (ep_hierarchical_pipeline.cc): i's expert compute runs while
// i+1's two-stage dispatch and i-1's two-stage combine are in flight. Results are
// bitwise equal with and without overlap.
Status ep_hierarchical_forward(const MoeLayerArgs& args, const TopkRoutingView& routing, const EpContext& ctx,
                               HierWorkspace* ws, EpTimings* timings);

}  // namespace moe
