// The routing step of the expert-parallel layer (ep_route_tokens: router, node limit,
// degraded mode, capacity over the group) and ep_moe_forward, which routes and then
// runs the exchanges of ep_moe_layer.cc.
#include <string>

#include "moe/core/clock.h"
#include "moe/moe/ep_moe_layer.h"
#include "moe/moe/ep_trace.h"
#include "moe/moe/ep_workspace.h"
#include "moe/moe/router.h"

namespace moe {

using ep_detail::check_expert_tp;

StatusOr<TopkRoutingView> ep_route_tokens(const MoeLayerArgs& args, const EpContext& ctx, EpWorkspace* ws) {
  const ModelConfig& config = args.config;
  const int E = config.router.num_experts;
  if (ctx.placement.num_experts() != E) {
    return invalid_argument("the expert placement has " + std::to_string(ctx.placement.num_experts()) +
                            " experts but the model layer has " + std::to_string(E));
  }
  // Degraded mode: lost experts are never selected. Every rank holds the same
  // placement, so every rank fails here alike, before any exchange.
  const int lost = ctx.placement.num_lost();
  const uint8_t* alive = nullptr;
  if (lost > 0) {
    if (E - lost < config.router.top_k) {
      return failed_precondition((ctx.layer_id >= 0 ? "layer " + std::to_string(ctx.layer_id) : std::string("MoE layer")) +
                                 ": only " + std::to_string(E - lost) + " of " + std::to_string(E) +
                                 " experts have a live replica, fewer than top_k = " +
                                 std::to_string(config.router.top_k) + " (" + std::to_string(lost) + " lost)");
    }
    ws->alive.resize(static_cast<size_t>(E));  // (no allocation after the first degraded step)
    for (int e = 0; e < E; ++e) ws->alive[static_cast<size_t>(e)] = ctx.placement.is_lost(e) ? 0 : 1;
    alive = ws->alive.data();
  }
  const int max_nodes = ctx.options.max_nodes_per_token;
  NodeLimit limit;
  std::vector<int>& expert_node = ws->expert_node;
  if (max_nodes > 0 && max_nodes < ctx.comm->num_nodes()) {
    expert_node.resize(static_cast<size_t>(config.router.num_experts));
    for (int e = 0; e < config.router.num_experts; ++e) {
      // A lost expert is masked by the router; its node does not matter.
      expert_node[static_cast<size_t>(e)] = ctx.placement.is_lost(e) ? 0 : ctx.comm->node_of(ctx.placement.rank_of(e));
    }
    limit = NodeLimit{expert_node.data(), ctx.comm->num_nodes(), max_nodes};
  }
  const RouteOptions route{ctx.options.capacity, ctx.comm, limit.expert_node ? &limit : nullptr, alive};
  MOE_RETURN_IF_ERROR(route_tokens(args, route, &ws->moe));
  return ws->moe.routing(args.num_tokens(), config.router.top_k);
}

Status ep_moe_forward(const MoeLayerArgs& args, const EpContext& ctx, EpWorkspace* ws, EpTimings* timings) {
  MOE_RETURN_IF_ERROR(check_expert_tp(ctx));  // before the routing's exchanges
  TraceRecorder* trace = timings ? timings->trace : nullptr;
  const double t0 = trace ? now_seconds() : 0;
  MOE_ASSIGN_OR_RETURN(const TopkRoutingView routing, ep_route_tokens(args, ctx, ws));
  if (trace) trace->span(TraceName::kRouter, ctx.layer_id, t0, now_seconds());
  return ep_moe_forward_routed(args, routing, ctx, ws, timings);
}

const StepRoutingCounts& ep_last_routing_counts(const EpWorkspace& ws) { return ws.moe.counts; }

}  // namespace moe
