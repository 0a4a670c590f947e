#include "moe/moe/ep_hierarchical.h"

#include <cstring>
#include <vector>

#include "moe/core/check.h"
#include "moe/core/clock.h"
#include "moe/moe/ep_hierarchical_detail.h"
#include "moe/moe/ep_trace.h"
#include "moe/moe/ep_workspace.h"
#include "moe/moe/ep_wire.h"
#include "moe/placement/replica_choice.h"

namespace moe {

void HierWorkspaceDeleter::operator()(HierWorkspace* ws) const { delete ws; }
std::unique_ptr<HierWorkspace, HierWorkspaceDeleter> make_hier_workspace(const KernelOptions& kernel) {
  std::unique_ptr<HierWorkspace, HierWorkspaceDeleter> ws(new HierWorkspace());
  ws->experts.kernel = kernel;
  return ws;
}

namespace hier_detail {

namespace {

template <typename T>
T* grow(std::vector<T>& v, size_t n) {
  if (v.size() < n + 1) v.resize(n + 1);
  return v.data();
}

bool replicas(const HierCall& c) { return c.ctx.placement.has_replicas(); }

}  // namespace

Topology make_topology(const Communicator& comm) {
  Topology t;
  t.ranks_in_node.resize(static_cast<size_t>(comm.num_nodes()));
  t.local_index.resize(static_cast<size_t>(comm.size()));
  for (int r = 0; r < comm.size(); ++r) {
    auto& rs = t.ranks_in_node[static_cast<size_t>(comm.node_of(r))];
    t.local_index[static_cast<size_t>(r)] = static_cast<int>(rs.size());
    rs.push_back(r);
  }
  return t;
}

Status validate_routing(const HierCall& c, const HierBatch& b) {
  const int k = c.wire.top_k, E = c.args.config.router.num_experts;
  const int* topk_idx = c.topk.topk_idx;
  for (int64_t t = b.t0; t < b.t0 + b.n; ++t) {
    for (int j = 0; j < k; ++j) {
      const int e = topk_idx[t * k + j];
      if (e == kDroppedExpert) continue;
      if (e < 0 || e >= E) {
        return invalid_argument("token " + std::to_string(t) + " slot " + std::to_string(j) + ": expert id " +
                                std::to_string(e) + " outside [0, " + std::to_string(E) + ")");
      }
      if (c.ctx.placement.is_lost(e)) {
        return invalid_argument("token " + std::to_string(t) + " slot " + std::to_string(j) + ": expert " +
                                std::to_string(e) + " is lost (no live replica); the router must not select it");
      }
      for (int i = 0; i < j; ++i) {
        if (topk_idx[t * k + i] == e) {
          return invalid_argument("token " + std::to_string(t) + " lists expert " + std::to_string(e) + " twice");
        }
      }
    }
  }
  return ok_status();
}

void build_stage1(const HierCall& c, HierBatch& b, bool routing_ok) {
  Communicator& comm = c.comm();
  const int R = comm.size(), me = comm.rank(), my_node = comm.node_of(me), k = c.wire.top_k;
  const int* topk_idx = c.topk.topk_idx;
  const float* topk_weights = c.topk.topk_weights;
  // With replicas, each assignment's rank is chosen here (locality first); its node
  // decides the gateway. The gateway picks the replica inside its node (stage 2).
  const bool rep = replicas(c);
  if (rep && routing_ok) {
    b.assign.resize(static_cast<size_t>(b.n * k));
    choose_replicas(c.ctx.placement, topk_idx + b.t0 * k, b.n, k, me, c.ws->rank_node, &b.load, b.assign.data());
  }
  auto node_of_assignment = [&](int64_t i, int e) {  // i: assignment index within the batch
    return comm.node_of(rep ? b.assign[static_cast<size_t>(i)] : c.ctx.placement.rank_of(e));
  };
  StageRows& s1 = b.s1;
  s1.src_row.clear();
  s1.expert.clear();
  s1.weight.clear();
  s1.send_count.assign(static_cast<size_t>(R), routing_ok ? 0 : -1);
  b.gw_token.clear();
  b.own_e.clear();
  b.own_w.clear();
  if (!routing_ok) return;
  // Rows grouped by destination gateway rank (ascending), tokens ascending.
  for (int dest = 0; dest < R; ++dest) {
    const int node = comm.node_of(dest);
    const bool own = node == my_node;
    if (!own && c.topo.gateway(me, node) != dest) continue;
    if (own && dest != me) continue;
    for (int64_t t = b.t0; t < b.t0 + b.n; ++t) {
      bool any = false;
      int ids[kMaxTopK];
      float wts[kMaxTopK];
      for (int j = 0; j < k; ++j) {
        const int e = topk_idx[t * k + j];
        const bool here = e != kDroppedExpert && node_of_assignment((t - b.t0) * k + j, e) == node;
        ids[j] = here ? e : -1;
        wts[j] = here ? topk_weights[t * k + j] : 0.0f;
        any |= here;
      }
      if (!any) continue;
      if (own) {
        b.gw_token.push_back(static_cast<int>(t));
        b.own_e.insert(b.own_e.end(), ids, ids + k);
        b.own_w.insert(b.own_w.end(), wts, wts + k);
      } else {
        s1.src_row.push_back(static_cast<int>(t));
        s1.expert.insert(s1.expert.end(), ids, ids + k);
        s1.weight.insert(s1.weight.end(), wts, wts + k);
        ++s1.send_count[static_cast<size_t>(dest)];
      }
    }
  }
}

Status probe_stage1_counts(const HierCall& c, HierBatch& b, const Status& routing) {
  Communicator& comm = c.comm();
  const int R = comm.size();
  std::vector<int64_t> probe(b.s1.send_count), seen(static_cast<size_t>(R));
  MOE_RETURN_IF_ERROR(comm.alltoall_int64(probe.data(), seen.data()));
  if (!routing.ok()) return routing.with_context("rank " + std::to_string(comm.rank()));
  for (int r = 0; r < R; ++r) {
    if (seen[static_cast<size_t>(r)] < 0) {
      return invalid_argument("rank " + std::to_string(r) + " rejected its routing in this step (see its error)");
    }
  }
  b.s1.recv_count = std::move(seen);
  return ok_status();
}

void dispatch_bytes(const Wire& wire, StageRows& s, std::vector<size_t>* sb, std::vector<size_t>* rb) {
  const size_t R = s.send_count.size(), row = wire.row_bytes();
  sb->resize(R);
  rb->resize(R);
  s.num_recv = 0;
  for (size_t r = 0; r < R; ++r) {
    (*sb)[r] = static_cast<size_t>(s.send_count[r]) * row;
    (*rb)[r] = static_cast<size_t>(s.recv_count[r]) * row;
    s.num_recv += s.recv_count[r];
  }
}

void combine_bytes(const Wire& wire, const StageRows& s, std::vector<size_t>* sb, std::vector<size_t>* rb) {
  const size_t R = s.send_count.size(), ab = wire.act_bytes();
  sb->resize(R);
  rb->resize(R);
  for (size_t r = 0; r < R; ++r) {
    (*sb)[r] = static_cast<size_t>(s.recv_count[r]) * ab;
    (*rb)[r] = static_cast<size_t>(s.send_count[r]) * ab;
  }
}

void pack_stage(const Wire& wire, const StageRows& s, const float* act, std::vector<uint8_t>* send) {
  const size_t rows = s.src_row.size(), rb = wire.row_bytes(), ab = wire.act_bytes();
  const size_t k = static_cast<size_t>(wire.top_k);
  uint8_t* out = grow(*send, rows * rb);
  for (size_t i = 0; i < rows; ++i) {
    uint8_t* d = out + i * rb;
    pack_activations(act + static_cast<int64_t>(s.src_row[i]) * wire.hidden, wire.hidden, wire.bf16, d);
    std::memcpy(d + ab, s.expert.data() + i * k, k * sizeof(int));
    std::memcpy(d + ab + k * sizeof(int), s.weight.data() + i * k, k * sizeof(float));
  }
}

void unpack_stage(const Wire& wire, const StageRows& s, const uint8_t* recv, HierBatch& b) {
  const size_t rb = wire.row_bytes(), ab = wire.act_bytes();
  const int64_t k = wire.top_k;
  float* rx = grow(b.recv_x, static_cast<size_t>(s.num_recv * wire.hidden));
  int* re = grow(b.recv_e, static_cast<size_t>(s.num_recv * k));
  float* rw = grow(b.recv_w, static_cast<size_t>(s.num_recv * k));
  for (int64_t i = 0; i < s.num_recv; ++i) {
    const uint8_t* src = recv + static_cast<size_t>(i) * rb;
    unpack_activations(src, wire.hidden, wire.bf16, rx + i * wire.hidden);
    std::memcpy(re + i * k, src + ab, static_cast<size_t>(k) * sizeof(int));
    std::memcpy(rw + i * k, src + ab + static_cast<size_t>(k) * sizeof(int), static_cast<size_t>(k) * sizeof(float));
  }
}

void build_gateway_rows(const HierCall& c, HierBatch& b) {
  const int64_t hidden = c.wire.hidden, k = c.wire.top_k;
  const float* x = c.args.x_data();
  b.own_rows = static_cast<int>(b.gw_token.size());
  const int64_t G = b.own_rows + b.s1.num_recv;
  b.gateway_rows = G;
  float* gx = grow(b.gw_x, static_cast<size_t>(G * hidden));
  int* ge = grow(b.gw_e, static_cast<size_t>(G * k));
  float* gw = grow(b.gw_w, static_cast<size_t>(G * k));
  // Own-node rows never cross a link in stage 1: full f32 copies.
  for (int i = 0; i < b.own_rows; ++i) {
    std::memcpy(gx + static_cast<int64_t>(i) * hidden, x + static_cast<int64_t>(b.gw_token[static_cast<size_t>(i)]) * hidden,
                static_cast<size_t>(hidden) * sizeof(float));
  }
  if (b.own_rows > 0) {
    std::memcpy(ge, b.own_e.data(), b.own_e.size() * sizeof(int));
    std::memcpy(gw, b.own_w.data(), b.own_w.size() * sizeof(float));
  }
  const int64_t n1 = b.s1.num_recv;
  if (n1 > 0) {
    std::memcpy(gx + b.own_rows * hidden, b.recv_x.data(), static_cast<size_t>(n1 * hidden) * sizeof(float));
    std::memcpy(ge + b.own_rows * k, b.recv_e.data(), static_cast<size_t>(n1 * k) * sizeof(int));
    std::memcpy(gw + b.own_rows * k, b.recv_w.data(), static_cast<size_t>(n1 * k) * sizeof(float));
  }
}

void build_stage2(const HierCall& c, HierBatch& b) {
  Communicator& comm = c.comm();
  const int R = comm.size(), me = comm.rank(), my_node = comm.node_of(me), k = c.wire.top_k;
  const int64_t G = b.gateway_rows;
  const int* ge = b.gw_e.data();
  const float* gw = b.gw_w.data();
  StageRows& s2 = b.s2;
  s2.src_row.clear();
  s2.expert.clear();
  s2.weight.clear();
  s2.send_count.assign(static_cast<size_t>(R), 0);
  // The rank of this node that computes each gateway-row assignment.
  int* gdest = grow(b.gw_dest, static_cast<size_t>(G * k));
  b.load.assign(static_cast<size_t>(R), 0);
  const bool rep = replicas(c);
  for (int64_t i = 0; i < G * k; ++i) {
    const int e = ge[i];
    if (e < 0) {
      gdest[i] = -1;
    } else if (rep) {
      gdest[i] = choose_replica_on_node(c.ctx.placement, e, my_node, me, c.ws->rank_node, &b.load);
    } else {
      gdest[i] = c.ctx.placement.rank_of(e);
    }
  }
  for (int dest : c.topo.ranks_in_node[static_cast<size_t>(my_node)]) {
    for (int64_t g = 0; g < G; ++g) {
      bool any = false;
      for (int j = 0; j < k; ++j) any |= gdest[g * k + j] == dest;
      if (!any) continue;
      s2.src_row.push_back(static_cast<int>(g));
      for (int j = 0; j < k; ++j) {
        const bool here = gdest[g * k + j] == dest;
        s2.expert.push_back(here ? ge[g * k + j] : -1);
        s2.weight.push_back(here ? gw[g * k + j] : 0.0f);
      }
      ++s2.send_count[static_cast<size_t>(dest)];
    }
  }
}

Status check_stage2_experts(const HierCall& c, const HierBatch& b) {
  const int me = c.comm().rank();
  for (int64_t i = 0; i < b.s2.num_recv * c.wire.top_k; ++i) {
    const int e = b.recv_e[static_cast<size_t>(i)];
    if (e >= 0 && !c.ctx.placement.holds(me, e)) {
      return internal_error("rank " + std::to_string(me) + " received a row for expert " + std::to_string(e) +
                            ", which it does not hold (ranks disagree on the expert placement)");
    }
  }
  return ok_status();
}

void compute_experts(const HierCall& c, HierBatch& b) {
  const int64_t n = b.s2.num_recv;
  const double tc = now_seconds();
  float* y = grow(b.y, static_cast<size_t>(n * c.wire.hidden));
  grow(b.recv_x, static_cast<size_t>(n * c.wire.hidden));
  const MoeLayerArgs rows_args = MoeLayerArgs::f32(c.args.config, c.args.layer, b.recv_x.data(), n, y);
  grouped_expert_ffn(rows_args, TopkRoutingView{b.recv_e.data(), b.recv_w.data(), n, c.wire.top_k}, &c.ws->experts);
  if (c.timings) {
    const double t1 = now_seconds();
    c.timings->compute_seconds += t1 - tc;
    if (c.timings->trace) c.timings->trace->span(TraceName::kExpertCompute, c.wire.layer, tc, t1);
  }
}

void pack_results(const Wire& wire, const float* rows, int64_t n, std::vector<uint8_t>* send) {
  const size_t ab = wire.act_bytes();
  uint8_t* out = grow(*send, static_cast<size_t>(n) * ab);
  for (int64_t i = 0; i < n; ++i) pack_activations(rows + i * wire.hidden, wire.hidden, wire.bf16, out + static_cast<size_t>(i) * ab);
}

void accumulate_results(const HierCall& c, const StageRows& s, const uint8_t* recv, float* acc) {
  const size_t ab = c.wire.act_bytes();
  const int64_t hidden = c.wire.hidden;
  float* row = grow(c.ws->row, static_cast<size_t>(hidden));
  for (size_t i = 0; i < s.src_row.size(); ++i) {
    unpack_activations(recv + i * ab, hidden, c.wire.bf16, row);
    float* dst = acc + static_cast<int64_t>(s.src_row[i]) * hidden;
    for (int64_t h = 0; h < hidden; ++h) dst[h] += row[h];
  }
}

float* zero_gateway_out(const HierCall& c, HierBatch& b) {
  const size_t count = static_cast<size_t>(b.gateway_rows * c.wire.hidden);
  float* gout = grow(b.gw_out, count);
  std::memset(gout, 0, count * sizeof(float));
  return gout;
}

void add_own_rows(const HierCall& c, const HierBatch& b, float* out) {
  const int64_t hidden = c.wire.hidden;
  for (int i = 0; i < b.own_rows; ++i) {
    float* dst = out + static_cast<int64_t>(b.gw_token[static_cast<size_t>(i)]) * hidden;
    const float* src = b.gw_out.data() + static_cast<int64_t>(i) * hidden;
    for (int64_t h = 0; h < hidden; ++h) dst[h] += src[h];
  }
}

void count_issued(const HierCall& c, const std::vector<size_t>& sb, const std::vector<size_t>& rb) {
  if (c.timings == nullptr) return;
  int64_t sent = 0;
  for (size_t r = 0; r < sb.size(); ++r) sent += static_cast<int64_t>(sb[r]);
  c.timings->bytes_sent += sent;
  add_link_bytes(c.timings, c.wire.layer, sb, rb);
}

void count_finished(const HierCall& c, EpWaitRecord w) {
  if (c.timings == nullptr) return;
  c.timings->comm_wait_seconds += w.t1 - w.t0;
  c.timings->exchange_seconds += w.t1 - w.issued;
  w.layer = c.wire.layer;
  trace_wait(*c.timings, w);
}

}  // namespace hier_detail

namespace {

using namespace hier_detail;

// One blocking payload exchange of b.send -> b.recv (sizes b.send_bytes / recv_bytes).
Status blocking_exchange(const HierCall& c, HierBatch& b, size_t recv_total, TraceExchange kind) {
  if (b.recv.size() < recv_total + 1) b.recv.resize(recv_total + 1);
  uint8_t* recv = b.recv.data();
  count_issued(c, b.send_bytes, b.recv_bytes);
  const double t0 = now_seconds();
  MOE_RETURN_IF_ERROR(c.comm().alltoallv(b.send.data(), b.send_bytes, recv, b.recv_bytes));
  count_finished(c, {c.wire.layer, 0, kind, t0, t0, now_seconds()});
  return ok_status();
}

// Counts (stage 2 only: stage 1's came with the probe), then the rows of stage s (in the
// caller's dispatch span).
Status exchange_rows(const HierCall& c, HierBatch& b, StageRows& s, const float* act, bool counts) {
  if (counts) {
    s.recv_count.assign(s.send_count.size(), 0);
    MOE_RETURN_IF_ERROR(c.comm().alltoall_int64(s.send_count.data(), s.recv_count.data()));
  }
  dispatch_bytes(c.wire, s, &b.send_bytes, &b.recv_bytes);
  pack_stage(c.wire, s, act, &b.send);
  MOE_RETURN_IF_ERROR(blocking_exchange(c, b, static_cast<size_t>(s.num_recv) * c.wire.row_bytes(), TraceExchange::kDispatch));
  unpack_stage(c.wire, s, b.recv.data(), b);
  return ok_status();
}

// Returns result rows along the reverse path of stage s and adds them into acc.
Status combine_back(const HierCall& c, HierBatch& b, const StageRows& s, const float* rows_back, float* acc) {
  TraceSpan span(c.timings ? c.timings->trace : nullptr, TraceName::kCombine, c.wire.layer);
  combine_bytes(c.wire, s, &b.send_bytes, &b.recv_bytes);
  pack_results(c.wire, rows_back, s.num_recv, &b.send);
  MOE_RETURN_IF_ERROR(blocking_exchange(c, b, s.src_row.size() * c.wire.act_bytes(), TraceExchange::kCombine));
  accumulate_results(c, s, b.recv.data(), acc);
  return ok_status();
}

}  // namespace

Status ep_hierarchical_forward(const MoeLayerArgs& args, const TopkRoutingView& topk, const EpContext& ctx,
                               HierWorkspace* ws, EpTimings* timings) {
  check_moe_layer_args(args);
  MOE_CHECK(topk.num_tokens == args.num_tokens() && topk.num_topk == args.config.router.top_k);
  const ModelConfig& config = args.config;
  Communicator& comm = *ctx.comm;
  const int R = comm.size(), k = config.router.top_k;
  const HierCall c{args, topk, ctx, ws, timings, Wire{config.hidden_size, k, ctx.options.a2a_bf16, ctx.layer_id},
                   make_topology(comm)};
  if (k > kMaxTopK) return invalid_argument("top_k " + std::to_string(k) + " exceeds " + std::to_string(kMaxTopK));
  const int64_t num_tokens = topk.num_tokens;
  int micro_batches = 1;
  if (ctx.options.overlap) {
    MOE_ASSIGN_OR_RETURN(micro_batches, ep_detail::micro_batch_count(ctx, num_tokens));
  }
  if (timings) ++timings->calls;
  float* out = args.out_data();
  if (num_tokens > 0) std::memset(out, 0, static_cast<size_t>(num_tokens * c.wire.hidden) * sizeof(float));
  ws->rank_node.resize(static_cast<size_t>(R));
  for (int r = 0; r < R; ++r) ws->rank_node[static_cast<size_t>(r)] = comm.node_of(r);
  for (HierBatch& b : ws->mb) b.request.reset();  // an exchange an earlier error left in flight is abandoned
  if (micro_batches >= 2) return hierarchical_pipeline(c, micro_batches);

  HierBatch& b = ws->mb[0];
  b.t0 = 0;
  b.n = num_tokens;
  {
    // Counts first, so a rejected routing fails every rank before any payload moves.
    TraceSpan span(timings ? timings->trace : nullptr, TraceName::kDispatch, c.wire.layer);
    const Status routing = validate_routing(c, b);
    build_stage1(c, b, routing.ok());
    MOE_RETURN_IF_ERROR(probe_stage1_counts(c, b, routing));
    MOE_RETURN_IF_ERROR(exchange_rows(c, b, b.s1, args.x_data(), false));
  }
  build_gateway_rows(c, b);
  build_stage2(c, b);
  {
    TraceSpan span(timings ? timings->trace : nullptr, TraceName::kDispatch, c.wire.layer);
    MOE_RETURN_IF_ERROR(exchange_rows(c, b, b.s2, b.gw_x.data(), true));
  }
  MOE_RETURN_IF_ERROR(check_stage2_experts(c, b));
  // Experts, then combine back: stage 2 into gateway rows, stage 1 into tokens.
  compute_experts(c, b);
  float* gout = zero_gateway_out(c, b);
  MOE_RETURN_IF_ERROR(combine_back(c, b, b.s2, b.y.data(), gout));
  add_own_rows(c, b, out);
  return combine_back(c, b, b.s1, gout + static_cast<int64_t>(b.own_rows) * c.wire.hidden, out);
}

}  // namespace moe
