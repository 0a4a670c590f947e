#include "moe/moe/ep_hierarchical.h"

#include <cstring>
#include <functional>
#include <vector>

#include "moe/core/check.h"
#include "moe/core/clock.h"
#include "moe/moe/ep_trace.h"
#include "moe/moe/ep_wire.h"
#include "moe/placement/replica_choice.h"

namespace moe {

// One stage's rows: what to send where and the bytes each way.
struct StageRows {
  std::vector<int> src_row;       // [rows] index of the row's source (token or gateway row)
  std::vector<int> expert;        // [rows, top_k] ids for the destination, -1 elsewhere
  std::vector<float> weight;      // [rows, top_k]
  std::vector<int64_t> send_count, recv_count;  // [num_ranks] rows
  int64_t num_recv = 0;
};

struct HierWorkspace {
  StageRows s1, s2;
  std::vector<uint8_t> send, recv;
  std::vector<float> gw_x, gw_w, gw_out, y, recv_x, recv_w, row;
  std::vector<int> gw_e, recv_e, gw_token;  // gw_token: own-node gateway rows -> token
  std::vector<int> assign, gw_dest, rank_node;  // chosen replica ranks (source, gateway)
  std::vector<int64_t> load;
  std::vector<int> own_e;    // [own_rows, top_k] own-node gateway rows' expert ids
  std::vector<float> own_w;  // [own_rows, top_k] their weights
  int own_rows = 0;
  ExpertWorkspace experts;
};

void HierWorkspaceDeleter::operator()(HierWorkspace* ws) const { delete ws; }
std::unique_ptr<HierWorkspace, HierWorkspaceDeleter> make_hier_workspace(const KernelOptions& kernel) {
  std::unique_ptr<HierWorkspace, HierWorkspaceDeleter> ws(new HierWorkspace());
  ws->experts.kernel = kernel;
  return ws;
}

namespace {

constexpr int kMaxTopK = 64;

struct Topology {
  std::vector<std::vector<int>> ranks_in_node;  // ascending ranks per node
  std::vector<int> local_index;                 // [num_ranks]
  int gateway(int sender, int node) const {
    const auto& rs = ranks_in_node[static_cast<size_t>(node)];
    return rs[static_cast<size_t>(local_index[static_cast<size_t>(sender)]) % rs.size()];
  }
};

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

template <typename T>
T* grow(std::vector<T>& v, size_t n) {
  if (v.size() < n + 1) v.resize(n + 1);
  return v.data();
}

struct Wire {
  int64_t hidden;
  int top_k;
  bool bf16;
  int layer;  // for the trace and the per-link byte counters
  size_t act_bytes() const { return static_cast<size_t>(hidden) * (bf16 ? 2 : 4); }
  size_t row_bytes() const { return act_bytes() + static_cast<size_t>(top_k) * (sizeof(int) + sizeof(float)); }

  void pack_act(const float* src, uint8_t* dst) const { pack_activations(src, hidden, bf16, dst); }
  void unpack_act(const uint8_t* src, float* dst) const { unpack_activations(src, hidden, bf16, dst); }
};

// Counts exchange + payload exchange of rows built from `act(src_row)`.
Status exchange_rows(Communicator& comm, const Wire& wire, StageRows& s, const std::function<const float*(int)>& act,
                     HierWorkspace* ws, std::vector<float>* recv_x, std::vector<int>* recv_e,
                     std::vector<float>* recv_w, EpTimings* timings) {
  TraceSpan span(timings ? timings->trace : nullptr, TraceName::kDispatch, wire.layer);
  const int R = comm.size();
  s.recv_count.assign(static_cast<size_t>(R), 0);
  MOE_RETURN_IF_ERROR(comm.alltoall_int64(s.send_count.data(), s.recv_count.data()));
  const size_t rb = wire.row_bytes();
  std::vector<size_t> sb(static_cast<size_t>(R)), rbytes(static_cast<size_t>(R));
  s.num_recv = 0;
  for (int r = 0; r < R; ++r) {
    sb[static_cast<size_t>(r)] = static_cast<size_t>(s.send_count[static_cast<size_t>(r)]) * rb;
    rbytes[static_cast<size_t>(r)] = static_cast<size_t>(s.recv_count[static_cast<size_t>(r)]) * rb;
    s.num_recv += s.recv_count[static_cast<size_t>(r)];
  }
  const size_t rows = s.src_row.size();
  uint8_t* send = grow(ws->send, rows * rb);
  for (size_t i = 0; i < rows; ++i) {
    uint8_t* d = send + i * rb;
    wire.pack_act(act(s.src_row[i]), d);
    std::memcpy(d + wire.act_bytes(), s.expert.data() + i * static_cast<size_t>(wire.top_k), static_cast<size_t>(wire.top_k) * sizeof(int));
    std::memcpy(d + wire.act_bytes() + static_cast<size_t>(wire.top_k) * sizeof(int),
                s.weight.data() + i * static_cast<size_t>(wire.top_k), static_cast<size_t>(wire.top_k) * sizeof(float));
  }
  uint8_t* recv = grow(ws->recv, static_cast<size_t>(s.num_recv) * rb);
  const double t0 = now_seconds();
  MOE_RETURN_IF_ERROR(comm.alltoallv(send, sb, recv, rbytes));
  if (timings) {
    const double t1 = now_seconds();
    timings->comm_wait_seconds += t1 - t0;
    timings->exchange_seconds += t1 - t0;
    timings->bytes_sent += static_cast<int64_t>(rows * rb);
    add_link_bytes(timings, wire.layer, sb, rbytes);
    trace_wait(*timings, {wire.layer, 0, TraceExchange::kDispatch, t0, t0, t1});
  }
  float* rx = grow(*recv_x, static_cast<size_t>(s.num_recv * wire.hidden));
  int* re = grow(*recv_e, static_cast<size_t>(s.num_recv * wire.top_k));
  float* rw = grow(*recv_w, static_cast<size_t>(s.num_recv * wire.top_k));
  for (int64_t i = 0; i < s.num_recv; ++i) {
    const uint8_t* src = recv + static_cast<size_t>(i) * rb;
    wire.unpack_act(src, rx + i * wire.hidden);
    std::memcpy(re + i * wire.top_k, src + wire.act_bytes(), static_cast<size_t>(wire.top_k) * sizeof(int));
    std::memcpy(rw + i * wire.top_k, src + wire.act_bytes() + static_cast<size_t>(wire.top_k) * sizeof(int),
                static_cast<size_t>(wire.top_k) * sizeof(float));
  }
  return ok_status();
}

// Returns result rows along the reverse path of stage `s`: sends `rows_back`
// ([s.num_recv, hidden]) and adds what comes back into acc[s.src_row[i]].
Status combine_back(Communicator& comm, const Wire& wire, const StageRows& s, const float* rows_back, float* acc,
                    HierWorkspace* ws, EpTimings* timings) {
  TraceSpan span(timings ? timings->trace : nullptr, TraceName::kCombine, wire.layer);
  const int R = comm.size();
  const size_t ab = wire.act_bytes();
  std::vector<size_t> sb(static_cast<size_t>(R)), rbytes(static_cast<size_t>(R));
  for (int r = 0; r < R; ++r) {
    sb[static_cast<size_t>(r)] = static_cast<size_t>(s.recv_count[static_cast<size_t>(r)]) * ab;
    rbytes[static_cast<size_t>(r)] = static_cast<size_t>(s.send_count[static_cast<size_t>(r)]) * ab;
  }
  uint8_t* send = grow(ws->send, static_cast<size_t>(s.num_recv) * ab);
  for (int64_t i = 0; i < s.num_recv; ++i) wire.pack_act(rows_back + i * wire.hidden, send + static_cast<size_t>(i) * ab);
  const size_t rows = s.src_row.size();
  uint8_t* recv = grow(ws->recv, rows * ab);
  const double t0 = now_seconds();
  MOE_RETURN_IF_ERROR(comm.alltoallv(send, sb, recv, rbytes));
  if (timings) {
    const double t1 = now_seconds();
    timings->comm_wait_seconds += t1 - t0;
    timings->exchange_seconds += t1 - t0;
    timings->bytes_sent += static_cast<int64_t>(s.num_recv) * static_cast<int64_t>(ab);
    add_link_bytes(timings, wire.layer, sb, rbytes);
    trace_wait(*timings, {wire.layer, 0, TraceExchange::kCombine, t0, t0, t1});
  }
  float* row = grow(ws->row, static_cast<size_t>(wire.hidden));
  for (size_t i = 0; i < rows; ++i) {
    wire.unpack_act(recv + i * ab, row);
    float* dst = acc + static_cast<int64_t>(s.src_row[i]) * wire.hidden;
    for (int64_t h = 0; h < wire.hidden; ++h) dst[h] += row[h];
  }
  return ok_status();
}

}  // namespace

Status ep_hierarchical_forward(const MoeLayerArgs& args, const TopkRoutingView& topk, const EpContext& ctx,
                               HierWorkspace* ws, EpTimings* timings) {
  check_moe_layer_args(args);
  MOE_CHECK(topk.num_tokens == args.num_tokens() && topk.num_topk == args.config.router.top_k);
  const ModelConfig& config = args.config;
  const float* x = args.x_data();
  float* out = args.out_data();
  const int64_t num_tokens = topk.num_tokens;
  const int* topk_idx = topk.topk_idx;
  const float* topk_weights = topk.topk_weights;
  Communicator& comm = *ctx.comm;
  const ExpertPlacement& placement = ctx.placement;
  const int R = comm.size(), me = comm.rank(), my_node = comm.node_of(me);
  const int k = config.router.top_k, E = config.router.num_experts;
  const Wire wire{config.hidden_size, k, ctx.options.a2a_bf16, ctx.layer_id};
  const Topology topo = make_topology(comm);
  if (k > kMaxTopK) return invalid_argument("top_k " + std::to_string(k) + " exceeds " + std::to_string(kMaxTopK));
  if (timings) ++timings->calls;
  if (num_tokens > 0) std::memset(out, 0, static_cast<size_t>(num_tokens * wire.hidden) * sizeof(float));

  // Validate the routing; a bad row is announced to every rank through the counts.
  Status routing = ok_status();
  for (int64_t t = 0; t < num_tokens && routing.ok(); ++t) {
    for (int j = 0; j < k && routing.ok(); ++j) {
      const int e = topk_idx[t * k + j];
      if (e == kDroppedExpert) continue;
      if (e < 0 || e >= E) {
        routing = invalid_argument("token " + std::to_string(t) + " slot " + std::to_string(j) + ": expert id " +
                                   std::to_string(e) + " outside [0, " + std::to_string(E) + ")");
      } else if (placement.is_lost(e)) {
        routing = invalid_argument("token " + std::to_string(t) + " slot " + std::to_string(j) + ": expert " +
                                   std::to_string(e) + " is lost (no live replica); the router must not select it");
      }
      for (int i = 0; i < j && routing.ok(); ++i) {
        if (topk_idx[t * k + i] == e) {
          routing = invalid_argument("token " + std::to_string(t) + " lists expert " + std::to_string(e) + " twice");
        }
      }
    }
  }

  // With replicas, each assignment's rank is chosen here (locality first); its node
  // decides the gateway. The gateway picks the replica inside its node (stage 2).
  ws->rank_node.resize(static_cast<size_t>(R));
  for (int r = 0; r < R; ++r) ws->rank_node[static_cast<size_t>(r)] = comm.node_of(r);
  const bool replicas = placement.has_replicas();
  if (replicas && routing.ok()) {
    ws->assign.resize(static_cast<size_t>(num_tokens * k));
    choose_replicas(placement, topk_idx, num_tokens, k, me, ws->rank_node, &ws->load, ws->assign.data());
  }
  auto node_of_assignment = [&](int64_t i, int e) {
    return comm.node_of(replicas ? ws->assign[static_cast<size_t>(i)] : placement.rank_of(e));
  };
  // Stage 1 rows: (token, remote node) -> gateway; own-node tokens become gateway rows.
  StageRows& s1 = ws->s1;
  s1.src_row.clear();
  s1.expert.clear();
  s1.weight.clear();
  s1.send_count.assign(static_cast<size_t>(R), routing.ok() ? 0 : -1);
  ws->gw_token.clear();
  std::vector<int>& own_e = ws->own_e;
  std::vector<float>& own_w = ws->own_w;
  own_e.clear();
  own_w.clear();
  if (routing.ok()) {
    // Rows grouped by destination gateway rank (ascending), tokens ascending.
    for (int dest = 0; dest < R; ++dest) {
      const int node = comm.node_of(dest);
      const bool own = node == my_node;
      if (!own && topo.gateway(me, node) != dest) continue;
      if (own && dest != me) continue;
      for (int64_t t = 0; t < num_tokens; ++t) {
        bool any = false;
        int ids[kMaxTopK];
        float ws_[kMaxTopK];
        for (int j = 0; j < k; ++j) {
          const int e = topk_idx[t * k + j];
          const bool here = e != kDroppedExpert && node_of_assignment(t * k + j, e) == node;
          ids[j] = here ? e : -1;
          ws_[j] = here ? topk_weights[t * k + j] : 0.0f;
          any |= here;
        }
        if (!any) continue;
        if (own) {
          ws->gw_token.push_back(static_cast<int>(t));
          own_e.insert(own_e.end(), ids, ids + k);
          own_w.insert(own_w.end(), ws_, ws_ + k);
        } else {
          s1.src_row.push_back(static_cast<int>(t));
          s1.expert.insert(s1.expert.end(), ids, ids + k);
          s1.weight.insert(s1.weight.end(), ws_, ws_ + k);
          ++s1.send_count[static_cast<size_t>(dest)];
        }
      }
    }
  }
  s1.recv_count.assign(static_cast<size_t>(R), 0);
  {
    // Counts first, so a rejected routing fails every rank before any payload moves.
    std::vector<int64_t> probe(s1.send_count), seen(static_cast<size_t>(R));
    MOE_RETURN_IF_ERROR(comm.alltoall_int64(probe.data(), seen.data()));
    if (!routing.ok()) return routing.with_context("rank " + std::to_string(me));
    for (int r = 0; r < R; ++r) {
      if (seen[static_cast<size_t>(r)] < 0) {
        return invalid_argument("rank " + std::to_string(r) + " rejected its routing in this step (see its error)");
      }
    }
  }
  MOE_RETURN_IF_ERROR(exchange_rows(comm, wire, s1, [&](int t) { return x + static_cast<int64_t>(t) * wire.hidden; },
                                    ws, &ws->recv_x, &ws->recv_e, &ws->recv_w, timings));

  // Gateway rows: own-node tokens first, then the rows received in stage 1.
  ws->own_rows = static_cast<int>(ws->gw_token.size());
  const int64_t G = ws->own_rows + s1.num_recv;
  float* gx = grow(ws->gw_x, static_cast<size_t>(G * wire.hidden));
  int* ge = grow(ws->gw_e, static_cast<size_t>(G * k));
  float* gw = grow(ws->gw_w, static_cast<size_t>(G * k));
  // Own-node rows never cross a link in stage 1: full f32 copies.
  for (int i = 0; i < ws->own_rows; ++i) {
    std::memcpy(gx + static_cast<int64_t>(i) * wire.hidden,
                x + static_cast<int64_t>(ws->gw_token[static_cast<size_t>(i)]) * wire.hidden,
                static_cast<size_t>(wire.hidden) * sizeof(float));
  }
  if (ws->own_rows > 0) {
    std::memcpy(ge, own_e.data(), own_e.size() * sizeof(int));
    std::memcpy(gw, own_w.data(), own_w.size() * sizeof(float));
  }
  if (s1.num_recv > 0) {
    std::memcpy(gx + static_cast<int64_t>(ws->own_rows) * wire.hidden, ws->recv_x.data(),
                static_cast<size_t>(s1.num_recv * wire.hidden) * sizeof(float));
    std::memcpy(ge + static_cast<int64_t>(ws->own_rows) * k, ws->recv_e.data(), static_cast<size_t>(s1.num_recv * k) * sizeof(int));
    std::memcpy(gw + static_cast<int64_t>(ws->own_rows) * k, ws->recv_w.data(), static_cast<size_t>(s1.num_recv * k) * sizeof(float));
  }

  // Stage 2 rows: gateway row -> each rank of this node holding some of its experts.
  StageRows& s2 = ws->s2;
  s2.src_row.clear();
  s2.expert.clear();
  s2.weight.clear();
  s2.send_count.assign(static_cast<size_t>(R), 0);
  // The rank of this node that computes each gateway-row assignment.
  int* gdest = grow(ws->gw_dest, static_cast<size_t>(G * k));
  ws->load.assign(static_cast<size_t>(R), 0);
  for (int64_t i = 0; i < G * k; ++i) {
    const int e = ge[i];
    if (e < 0) {
      gdest[i] = -1;
    } else if (replicas) {
      gdest[i] = choose_replica_on_node(placement, e, my_node, me, ws->rank_node, &ws->load);
    } else {
      gdest[i] = placement.rank_of(e);
    }
  }
  for (int dest : topo.ranks_in_node[static_cast<size_t>(my_node)]) {
    for (int64_t g = 0; g < G; ++g) {
      bool any = false;
      for (int j = 0; j < k; ++j) any |= gdest[g * k + j] == dest;
      if (!any) continue;
      s2.src_row.push_back(static_cast<int>(g));
      for (int j = 0; j < k; ++j) {
        const int e = ge[g * k + j];
        const bool here = gdest[g * k + j] == dest;
        s2.expert.push_back(here ? e : -1);
        s2.weight.push_back(here ? gw[g * k + j] : 0.0f);
      }
      ++s2.send_count[static_cast<size_t>(dest)];
    }
  }
  MOE_RETURN_IF_ERROR(exchange_rows(comm, wire, s2, [&](int g) { return gx + static_cast<int64_t>(g) * wire.hidden; },
                                    ws, &ws->recv_x, &ws->recv_e, &ws->recv_w, timings));
  for (int64_t i = 0; i < s2.num_recv * k; ++i) {
    const int e = ws->recv_e[static_cast<size_t>(i)];
    if (e >= 0 && !placement.holds(me, e)) {
      return internal_error("rank " + std::to_string(me) + " received a row for expert " + std::to_string(e) +
                            ", which it does not hold (ranks disagree on the expert placement)");
    }
  }

  // Experts, then combine back: stage 2 into gateway rows, stage 1 into tokens.
  const double tc = now_seconds();
  float* y = grow(ws->y, static_cast<size_t>(s2.num_recv * wire.hidden));
  const MoeLayerArgs rows_args = MoeLayerArgs::f32(config, args.layer, ws->recv_x.data(), s2.num_recv, y);
  grouped_expert_ffn(rows_args, TopkRoutingView{ws->recv_e.data(), ws->recv_w.data(), s2.num_recv, k}, &ws->experts);
  if (timings) {
    const double t1 = now_seconds();
    timings->compute_seconds += t1 - tc;
    if (timings->trace) timings->trace->span(TraceName::kExpertCompute, wire.layer, tc, t1);
  }
  float* gout = grow(ws->gw_out, static_cast<size_t>(G * wire.hidden));
  std::memset(gout, 0, static_cast<size_t>(G * wire.hidden) * sizeof(float));
  MOE_RETURN_IF_ERROR(combine_back(comm, wire, s2, y, gout, ws, timings));
  for (int i = 0; i < ws->own_rows; ++i) {
    float* dst = out + static_cast<int64_t>(ws->gw_token[static_cast<size_t>(i)]) * wire.hidden;
    const float* src = gout + static_cast<int64_t>(i) * wire.hidden;
    for (int64_t h = 0; h < wire.hidden; ++h) dst[h] += src[h];
  }
  return combine_back(comm, wire, s1, gout + static_cast<int64_t>(ws->own_rows) * wire.hidden, out, ws, timings);
}

}  // namespace moe
