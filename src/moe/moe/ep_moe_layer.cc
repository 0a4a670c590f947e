#include "moe/moe/ep_moe_layer.h"

#include <cstring>
#include <functional>
#include <memory>

#include "moe/core/check.h"
#include "moe/core/clock.h"
#include "moe/moe/ep_hierarchical.h"
#include "moe/moe/ep_trace.h"
#include "moe/moe/ep_wire.h"
#include "moe/moe/router.h"
#include "moe/placement/replica_choice.h"
#include "moe/tensor/dtype.h"

namespace moe {

namespace {

// One micro-batch's exchange state; buffers are reused across calls.
struct MicroBatch {
  int64_t t0 = 0, n = 0;  // token range [t0, t0 + n)
  DispatchLayout layout;
  std::vector<int64_t> send_rows, recv_rows;
  std::vector<size_t> send_bytes, recv_bytes, back_send_bytes, back_recv_bytes;
  std::vector<uint8_t> send_buf, recv_buf, back_send_buf, back_recv_buf;
  std::vector<float> recv_x, recv_w, y;
  std::vector<int> recv_e;
  std::vector<int> assign;             // [n, top_k] chosen replica rank (with replicas)
  std::vector<int64_t> replica_load;   // choose_replicas scratch
  int64_t num_recv = 0;
  std::unique_ptr<CommRequest> request;
  double started = 0;
  // Stage-wise state (ep_moe_begin / ep_moe_step).
  enum class Phase { kIdle, kDispatch, kGather, kScatter, kCombine } phase = Phase::kIdle;
  const ModelConfig* config = nullptr;
  const LayerWeights* layer = nullptr;
  float* out = nullptr;
  // expert_tp: rows received by each rank of the TP group, the all-gather of the
  // received rows and the reduce-scatter of the partial results.
  std::vector<int64_t> tp_rows;
  std::vector<size_t> ag_send_bytes, ag_recv_bytes, rs_send_bytes, rs_recv_bytes;
  std::vector<uint8_t> ag_send, ag_recv;
  std::vector<float> y_all, rs_recv;
  int64_t tp_total = 0, tp_offset = 0;  // rows gathered; this rank's first row among them
};

}  // namespace

struct EpWorkspace {
  MoeWorkspace moe;
  ExpertWorkspace experts;
  MicroBatch mb[2];
  std::vector<float> row;  // one returned row, unpacked
  std::vector<int> expert_node;  // [num_experts] node of each expert (node-limited routing)
  std::vector<int> rank_node;    // [num_ranks] node of each rank
  std::vector<uint8_t> alive;    // [num_experts] degraded mode: 0 = lost expert
  std::unique_ptr<HierWorkspace, HierWorkspaceDeleter> hier = make_hier_workspace();
};

void EpWorkspaceDeleter::operator()(EpWorkspace* ws) const { delete ws; }

namespace {

// A flat-exchange micro-batch of up to n tokens per rank, over R ranks: at most R * n
// rows arrive (a token goes to a rank once) and n * R rows leave.
void reserve_micro_batch(MicroBatch& mb, const ModelConfig& config, const EpContext& ctx, int64_t n) {
  const size_t R = static_cast<size_t>(ctx.comm->size());
  const size_t E = static_cast<size_t>(config.router.num_experts), k = static_cast<size_t>(config.router.top_k);
  const size_t hidden = static_cast<size_t>(config.hidden_size);
  const size_t act_bytes = ctx.options.a2a_bf16 ? 2 : 4;
  const size_t row_bytes = hidden * act_bytes + k * (sizeof(int) + sizeof(float));
  const size_t rows = R * static_cast<size_t>(n);  // bound on rows sent and on rows received
  DispatchLayout& L = mb.layout;
  L.num_tokens_per_rank.reserve(R);
  L.num_tokens_per_expert.reserve(E);
  L.is_token_in_rank.reserve(static_cast<size_t>(n) * R);
  L.send_offsets.reserve(R + 1);
  L.send_token_idx.reserve(rows);
  L.send_expert.reserve(rows * k);
  L.send_weight.reserve(rows * k);
  for (auto* v : {&mb.send_rows, &mb.recv_rows}) v->reserve(R);
  for (auto* v : {&mb.send_bytes, &mb.recv_bytes, &mb.back_send_bytes, &mb.back_recv_bytes}) v->reserve(R);
  mb.send_buf.reserve(rows * row_bytes + 1);
  mb.recv_buf.reserve(rows * row_bytes + 1);
  mb.back_send_buf.reserve(rows * hidden * act_bytes + 1);
  mb.back_recv_buf.reserve(rows * hidden * act_bytes + 1);
  mb.recv_x.reserve(rows * hidden + 1);
  mb.y.reserve(rows * hidden + 1);
  mb.recv_e.reserve(rows * k + 1);
  mb.recv_w.reserve(rows * k + 1);
  if (ctx.placement.has_replicas()) {
    mb.assign.reserve(static_cast<size_t>(n) * k);
    mb.replica_load.reserve(R);
  }
}

}  // namespace

EpWorkspacePtr make_ep_workspace(const ModelConfig& config, const EpContext& ctx, int64_t max_tokens,
                                 const KernelOptions& kernel) {
  EpWorkspacePtr ws(new EpWorkspace());
  ws->moe.kernel = kernel;
  ws->moe.experts.kernel = kernel;
  ws->experts.kernel = kernel;
  ws->hier = make_hier_workspace(kernel);
  ws->moe.reserve(config, max_tokens);
  const int R = ctx.comm->size();
  ws->row.reserve(static_cast<size_t>(config.hidden_size));
  ws->expert_node.reserve(static_cast<size_t>(config.router.num_experts));
  ws->rank_node.reserve(static_cast<size_t>(R));
  if (!ctx.options.hierarchical) {
    // Rows received per call: at most R * (tokens per rank).
    ws->experts.reserve(config, R * max_tokens);
    if (ctx.options.overlap) {
      reserve_micro_batch(ws->mb[0], config, ctx, max_tokens / 2);
      reserve_micro_batch(ws->mb[1], config, ctx, max_tokens - max_tokens / 2);
    } else {
      reserve_micro_batch(ws->mb[0], config, ctx, max_tokens);
    }
  }
  return ws;
}

namespace {

template <typename T>
T* grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

struct Ctx {
  const ModelConfig& config;
  const LayerWeights& layer;
  const EpContext& ep;
  EpWorkspace* ws;
  EpTimings* timings;
  int64_t hidden;
  int top_k;
  size_t act_bytes;  // bytes per activation element on the wire
  size_t row_bytes;  // dispatch row: activations + top_k ids + top_k weights
};

// Layout, counts exchange, packed send buffer.
Status prepare(Ctx& c, MicroBatch& mb, const float* x, const TopkRoutingView& routing) {
  TraceRecorder* trace = c.timings ? c.timings->trace : nullptr;
  TraceSpan span(trace, TraceName::kDispatch, c.ep.layer_id);
  const TopkRoutingView mine = routing.rows(mb.t0, mb.n);  // [n, top_k]
  Communicator& comm = *c.ep.comm;
  const int R = comm.size();
  // A bad routing on this rank is announced in the counts exchange (count -1), so that
  // every rank fails this step at once instead of waiting for a peer that left.
  const int* assign = nullptr;
  if (c.ep.placement.has_replicas()) {
    mb.assign.resize(static_cast<size_t>(mb.n * c.top_k));
    choose_replicas(c.ep.placement, mine.topk_idx, mb.n, c.top_k, comm.rank(), c.ws->rank_node, &mb.replica_load,
                    mb.assign.data());
    assign = mb.assign.data();
  }
  Status layout_status = compute_dispatch_layout(mine, c.ep.placement, &mb.layout, assign);
  if (layout_status.ok()) {
    mb.send_rows.assign(mb.layout.num_tokens_per_rank.begin(), mb.layout.num_tokens_per_rank.end());
  } else {
    mb.send_rows.assign(static_cast<size_t>(R), -1);
  }
  mb.recv_rows.assign(static_cast<size_t>(R), 0);
  const double counts_t0 = trace ? now_seconds() : 0;
  MOE_RETURN_IF_ERROR(comm.alltoall_int64(mb.send_rows.data(), mb.recv_rows.data()));
  if (trace) trace->span(TraceName::kWait, c.ep.layer_id, counts_t0, now_seconds(), 0, int(TraceExchange::kCounts));
  if (!layout_status.ok()) return layout_status.with_context("rank " + std::to_string(comm.rank()));
  for (int r = 0; r < R; ++r) {
    if (mb.recv_rows[static_cast<size_t>(r)] < 0) {
      return invalid_argument("rank " + std::to_string(r) + " rejected its routing in this step (see its error)");
    }
  }
  mb.send_bytes.resize(static_cast<size_t>(R));
  mb.recv_bytes.resize(static_cast<size_t>(R));
  mb.num_recv = 0;
  for (int r = 0; r < R; ++r) {
    mb.send_bytes[static_cast<size_t>(r)] = static_cast<size_t>(mb.send_rows[static_cast<size_t>(r)]) * c.row_bytes;
    mb.recv_bytes[static_cast<size_t>(r)] = static_cast<size_t>(mb.recv_rows[static_cast<size_t>(r)]) * c.row_bytes;
    mb.num_recv += mb.recv_rows[static_cast<size_t>(r)];
  }
  const int64_t total_send = mb.layout.total_send();
  uint8_t* send = grow(mb.send_buf, static_cast<size_t>(total_send) * c.row_bytes + 1);
  const bool bf16 = c.ep.options.a2a_bf16;
  for (int64_t row = 0; row < total_send; ++row) {
    uint8_t* dst = send + static_cast<size_t>(row) * c.row_bytes;
    const int64_t token = mb.t0 + mb.layout.send_token_idx[static_cast<size_t>(row)];
    pack_activations(x + token * c.hidden, c.hidden, bf16, dst);
    std::memcpy(dst + c.hidden * c.act_bytes, mb.layout.send_expert.data() + row * c.top_k,
                static_cast<size_t>(c.top_k) * sizeof(int));
    std::memcpy(dst + c.hidden * c.act_bytes + c.top_k * sizeof(int), mb.layout.send_weight.data() + row * c.top_k,
                static_cast<size_t>(c.top_k) * sizeof(float));
  }
  grow(mb.recv_buf, static_cast<size_t>(mb.num_recv) * c.row_bytes + 1);
  if (c.timings) {
    c.timings->bytes_sent += static_cast<int64_t>(total_send * c.row_bytes);
    add_link_bytes(c.timings, c.ep.layer_id, mb.send_bytes, mb.recv_bytes);
  }
  return ok_status();
}

Status start_dispatch(Ctx& c, MicroBatch& mb) {
  mb.started = now_seconds();
  MOE_ASSIGN_OR_RETURN(mb.request, c.ep.comm->ialltoallv(mb.send_buf.data(), mb.send_bytes, mb.recv_buf.data(),
                                                         mb.recv_bytes));
  return ok_status();
}

Status wait_request(Ctx& c, MicroBatch& mb) {
  const double t0 = now_seconds();
  Status st = mb.request->wait();
  mb.request.reset();
  if (c.timings) {
    const double t1 = now_seconds();
    c.timings->comm_wait_seconds += t1 - t0;
    c.timings->exchange_seconds += t1 - mb.started;
    using P = MicroBatch::Phase;  // the exchange in flight, for the trace
    const TraceExchange kind = mb.phase == P::kDispatch  ? TraceExchange::kDispatch
                               : mb.phase == P::kCombine ? TraceExchange::kCombine
                                                         : TraceExchange::kTensorParallel;
    trace_wait(*c.timings, {c.ep.layer_id, static_cast<int>(&mb - c.ws->mb), kind, mb.started, t0, t1});
  }
  return st;
}

// Polls the other micro-batch's exchange so it progresses during compute.
void poke(MicroBatch* other) {
  if (other != nullptr && other->request) (void)other->request->test();
}

// Unpacks n dispatch rows from buf into mb.recv_x / recv_e / recv_w, checking that
// this rank holds every expert named.
Status unpack_rows(Ctx& c, MicroBatch& mb, const uint8_t* buf, int64_t n) {
  float* rx = grow(mb.recv_x, static_cast<size_t>(n * c.hidden) + 1);
  int* re = grow(mb.recv_e, static_cast<size_t>(n * c.top_k) + 1);
  float* rw = grow(mb.recv_w, static_cast<size_t>(n * c.top_k) + 1);
  const bool bf16 = c.ep.options.a2a_bf16;
  const int me = c.ep.comm->rank();
  const int num_experts = c.config.router.num_experts;
  for (int64_t row = 0; row < n; ++row) {
    const uint8_t* src = buf + static_cast<size_t>(row) * c.row_bytes;
    unpack_activations(src, c.hidden, bf16, rx + row * c.hidden);
    std::memcpy(re + row * c.top_k, src + c.hidden * c.act_bytes, static_cast<size_t>(c.top_k) * sizeof(int));
    std::memcpy(rw + row * c.top_k, src + c.hidden * c.act_bytes + c.top_k * sizeof(int),
                static_cast<size_t>(c.top_k) * sizeof(float));
    for (int j = 0; j < c.top_k; ++j) {
      const int e = re[row * c.top_k + j];
      if (e >= num_experts || (e >= 0 && !c.ep.placement.holds(me, e))) {
        return internal_error("rank " + std::to_string(me) + " received a row for expert " + std::to_string(e) +
                              ", which it does not hold (ranks disagree on the expert placement)");
      }
    }
  }
  return ok_status();
}

// y[n, hidden] = the local experts' FFN of the unpacked rows.
void compute_rows(Ctx& c, MicroBatch& mb, int64_t n, float* y, MicroBatch* other) {
  poke(other);
  const double t0 = now_seconds();
  grouped_expert_ffn(MoeLayerArgs::f32(c.config, c.layer, mb.recv_x.data(), n, y),
                     TopkRoutingView{mb.recv_e.data(), mb.recv_w.data(), n, c.top_k}, &c.ws->experts);
  const double t1 = now_seconds();
  if (c.timings) c.timings->compute_seconds += t1 - t0;
  if (c.timings && c.timings->trace) c.timings->trace->span(TraceName::kExpertCompute, c.ep.layer_id, t0, t1);
  poke(other);
}

Status finish_dispatch_and_compute(Ctx& c, MicroBatch& mb, MicroBatch* other) {
  MOE_RETURN_IF_ERROR(wait_request(c, mb));
  const int64_t n = mb.num_recv;
  MOE_RETURN_IF_ERROR(unpack_rows(c, mb, mb.recv_buf.data(), n));
  compute_rows(c, mb, n, grow(mb.y, static_cast<size_t>(n * c.hidden) + 1), other);
  return ok_status();
}

// expert_tp, after the dispatch: all-gather the received rows (packed, as they arrived)
// inside the TP group, in TP rank order.
Status start_tp_gather(Ctx& c, MicroBatch& mb) {
  MOE_RETURN_IF_ERROR(wait_request(c, mb));
  Communicator& tp = *c.ep.expert_tp;
  const size_t T = static_cast<size_t>(tp.size());
  mb.tp_rows.assign(T, 0);
  MOE_RETURN_IF_ERROR(tp.allgather(&mb.num_recv, sizeof(int64_t), mb.tp_rows.data()));
  mb.tp_total = 0;
  mb.tp_offset = 0;
  for (size_t r = 0; r < T; ++r) {
    if (static_cast<int>(r) < tp.rank()) mb.tp_offset += mb.tp_rows[r];
    mb.tp_total += mb.tp_rows[r];
  }
  const size_t mine = static_cast<size_t>(mb.num_recv) * c.row_bytes;
  uint8_t* send = grow(mb.ag_send, T * mine + 1);
  for (size_t r = 0; r < T; ++r) {
    if (mine > 0) std::memcpy(send + r * mine, mb.recv_buf.data(), mine);
  }
  mb.ag_send_bytes.assign(T, mine);
  mb.ag_recv_bytes.resize(T);
  for (size_t r = 0; r < T; ++r) mb.ag_recv_bytes[r] = static_cast<size_t>(mb.tp_rows[r]) * c.row_bytes;
  grow(mb.ag_recv, static_cast<size_t>(mb.tp_total) * c.row_bytes + 1);
  mb.started = now_seconds();
  MOE_ASSIGN_OR_RETURN(mb.request, tp.ialltoallv(send, mb.ag_send_bytes, mb.ag_recv.data(), mb.ag_recv_bytes));
  return ok_status();
}

// expert_tp: partial expert FFN (this rank's intermediate shard) of every gathered row,
// then the reduce-scatter: rank r gets the partials of its own received rows.
Status compute_and_start_tp_scatter(Ctx& c, MicroBatch& mb, MicroBatch* other) {
  MOE_RETURN_IF_ERROR(wait_request(c, mb));
  Communicator& tp = *c.ep.expert_tp;
  const size_t T = static_cast<size_t>(tp.size());
  const int64_t n = mb.tp_total;
  MOE_RETURN_IF_ERROR(unpack_rows(c, mb, mb.ag_recv.data(), n));
  float* y = grow(mb.y_all, static_cast<size_t>(n * c.hidden) + 1);
  compute_rows(c, mb, n, y, other);
  const size_t row = static_cast<size_t>(c.hidden) * sizeof(float);
  mb.rs_send_bytes.resize(T);
  mb.rs_recv_bytes.assign(T, static_cast<size_t>(mb.num_recv) * row);
  for (size_t r = 0; r < T; ++r) mb.rs_send_bytes[r] = static_cast<size_t>(mb.tp_rows[r]) * row;
  grow(mb.rs_recv, T * static_cast<size_t>(mb.num_recv * c.hidden) + 1);
  mb.started = now_seconds();
  MOE_ASSIGN_OR_RETURN(mb.request, tp.ialltoallv(y, mb.rs_send_bytes, mb.rs_recv.data(), mb.rs_recv_bytes));
  return ok_status();
}

// expert_tp: mb.y = the sum of the TP ranks' partials of this rank's received rows
// (ascending TP rank).
Status finish_tp_scatter(Ctx& c, MicroBatch& mb) {
  MOE_RETURN_IF_ERROR(wait_request(c, mb));
  const size_t T = static_cast<size_t>(c.ep.expert_tp->size());
  const size_t count = static_cast<size_t>(mb.num_recv * c.hidden);
  float* y = grow(mb.y, count + 1);
  if (count == 0) return ok_status();
  std::memcpy(y, mb.rs_recv.data(), count * sizeof(float));
  for (size_t r = 1; r < T; ++r) {
    const float* src = mb.rs_recv.data() + r * count;
    for (size_t i = 0; i < count; ++i) y[i] += src[i];
  }
  return ok_status();
}

Status start_combine(Ctx& c, MicroBatch& mb) {
  TraceSpan span(c.timings ? c.timings->trace : nullptr, TraceName::kCombine, c.ep.layer_id);
  const int R = c.ep.comm->size();
  const size_t out_row = static_cast<size_t>(c.hidden) * c.act_bytes;
  mb.back_send_bytes.resize(static_cast<size_t>(R));
  mb.back_recv_bytes.resize(static_cast<size_t>(R));
  for (int r = 0; r < R; ++r) {
    mb.back_send_bytes[static_cast<size_t>(r)] = static_cast<size_t>(mb.recv_rows[static_cast<size_t>(r)]) * out_row;
    mb.back_recv_bytes[static_cast<size_t>(r)] = static_cast<size_t>(mb.send_rows[static_cast<size_t>(r)]) * out_row;
  }
  uint8_t* send = grow(mb.back_send_buf, static_cast<size_t>(mb.num_recv) * out_row + 1);
  pack_activations(mb.y.data(), mb.num_recv * c.hidden, c.ep.options.a2a_bf16, send);
  grow(mb.back_recv_buf, static_cast<size_t>(mb.layout.total_send()) * out_row + 1);
  mb.started = now_seconds();
  MOE_ASSIGN_OR_RETURN(mb.request, c.ep.comm->ialltoallv(send, mb.back_send_bytes, mb.back_recv_buf.data(),
                                                         mb.back_recv_bytes));
  if (c.timings) {
    c.timings->bytes_sent += static_cast<int64_t>(mb.num_recv * out_row);
    add_link_bytes(c.timings, c.ep.layer_id, mb.back_send_bytes, mb.back_recv_bytes);
  }
  return ok_status();
}

// Sums the returned partial results into out, rank by rank (ascending).
Status finish_combine(Ctx& c, MicroBatch& mb, float* out) {
  MOE_RETURN_IF_ERROR(wait_request(c, mb));
  TraceSpan span(c.timings ? c.timings->trace : nullptr, TraceName::kCombine, c.ep.layer_id);
  const size_t out_row = static_cast<size_t>(c.hidden) * c.act_bytes;
  std::vector<float>& tmp = c.ws->row;
  if (tmp.size() < static_cast<size_t>(c.hidden)) tmp.resize(static_cast<size_t>(c.hidden));
  for (int64_t row = 0; row < mb.layout.total_send(); ++row) {
    unpack_activations(mb.back_recv_buf.data() + static_cast<size_t>(row) * out_row, c.hidden, c.ep.options.a2a_bf16,
                       tmp.data());
    float* dst = out + (mb.t0 + mb.layout.send_token_idx[static_cast<size_t>(row)]) * c.hidden;
    for (int64_t h = 0; h < c.hidden; ++h) dst[h] += tmp[static_cast<size_t>(h)];
  }
  return ok_status();
}

Ctx make_ctx(const ModelConfig& config, const LayerWeights& layer, const EpContext& ep, EpWorkspace* ws,
             EpTimings* timings) {
  Ctx c{config, layer, ep, ws, timings, config.hidden_size, config.router.top_k,
        ep.options.a2a_bf16 ? size_t{2} : size_t{4}, 0};
  c.row_bytes = static_cast<size_t>(c.hidden) * c.act_bytes + static_cast<size_t>(c.top_k) * (sizeof(int) + sizeof(float));
  if (ws->rank_node.size() != static_cast<size_t>(ep.comm->size())) {
    ws->rank_node.resize(static_cast<size_t>(ep.comm->size()));
    for (int r = 0; r < ep.comm->size(); ++r) ws->rank_node[static_cast<size_t>(r)] = ep.comm->node_of(r);
  }
  return c;
}

Status check_expert_tp(const EpContext& ep) {
  if (ep.expert_tp != nullptr && ep.options.hierarchical) {
    return failed_precondition(
        "the hierarchical all-to-all cannot be combined with tensor-parallel experts (EpContext::expert_tp): the EP "
        "group has one rank per node, so there is nothing to forward inside a node; use the flat exchange");
  }
  return ok_status();
}

// The micro-batch's next stage; true once its rows of mb.out hold the result. On error
// the micro-batch is idle again (its exchange in flight, if any, abandoned).
StatusOr<bool> step_micro_batch(Ctx& c, MicroBatch& mb, MicroBatch* other) {
  using Phase = MicroBatch::Phase;
  Status st;
  bool done = false;
  switch (mb.phase) {
    case Phase::kIdle:
      return failed_precondition("ep_moe_step: no micro-batch in flight in this slot (call ep_moe_begin first)");
    case Phase::kDispatch:
      if (c.ep.expert_tp != nullptr) {
        st = start_tp_gather(c, mb);
        mb.phase = Phase::kGather;
      } else {
        st = finish_dispatch_and_compute(c, mb, other);
        if (st.ok()) st = start_combine(c, mb);
        mb.phase = Phase::kCombine;
      }
      break;
    case Phase::kGather:
      st = compute_and_start_tp_scatter(c, mb, other);
      mb.phase = Phase::kScatter;
      break;
    case Phase::kScatter:
      st = finish_tp_scatter(c, mb);
      if (st.ok()) st = start_combine(c, mb);
      mb.phase = Phase::kCombine;
      break;
    case Phase::kCombine:
      st = finish_combine(c, mb, mb.out);
      mb.phase = Phase::kIdle;
      done = true;
      break;
  }
  if (!st.ok()) {
    mb.phase = Phase::kIdle;
    mb.request.reset();
    return st;
  }
  return done;
}

// Routing layout, counts exchange and packing of micro-batch rows [mb.t0, mb.t0 + mb.n)
// of x; the dispatch is issued separately (issue_dispatch) so that two micro-batches
// exchange their counts before either dispatch, as before the stage-wise form.
Status prepare_micro_batch(Ctx& c, MicroBatch& mb, const float* x, const TopkRoutingView& routing, float* out) {
  mb.config = &c.config;
  mb.layer = &c.layer;
  mb.out = out;
  mb.phase = MicroBatch::Phase::kIdle;
  return prepare(c, mb, x, routing);
}

Status issue_dispatch(Ctx& c, MicroBatch& mb) {
  MOE_RETURN_IF_ERROR(start_dispatch(c, mb));
  mb.phase = MicroBatch::Phase::kDispatch;
  return ok_status();
}

// Runs micro-batches to completion, one stage of each in turn.
Status run_micro_batches(Ctx& c, MicroBatch* a, MicroBatch* b) {
  bool a_done = false, b_done = (b == nullptr);
  while (!a_done || !b_done) {
    if (!a_done) {
      MOE_ASSIGN_OR_RETURN(a_done, step_micro_batch(c, *a, b));
    }
    if (!b_done) {
      MOE_ASSIGN_OR_RETURN(b_done, step_micro_batch(c, *b, a));
    }
  }
  return ok_status();
}

}  // namespace

Status ep_moe_forward_routed(const MoeLayerArgs& args, const TopkRoutingView& routing, const EpContext& ep,
                             EpWorkspace* ws, EpTimings* timings) {
  MOE_RETURN_IF_ERROR(check_expert_tp(ep));
  if (ep.options.hierarchical) return ep_hierarchical_forward(args, routing, ep, ws->hier.get(), timings);
  check_moe_layer_args(args);
  MOE_CHECK(routing.num_tokens == args.num_tokens() && routing.num_topk == args.config.router.top_k);
  const float* x = args.x_data();
  float* out = args.out_data();
  const int64_t num_tokens = routing.num_tokens;
  Ctx c = make_ctx(args.config, args.layer, ep, ws, timings);
  if (timings) ++timings->calls;
  if (num_tokens > 0) std::memset(out, 0, static_cast<size_t>(num_tokens * c.hidden) * sizeof(float));

  if (!ep.options.overlap) {
    MicroBatch& mb = ws->mb[0];
    mb.t0 = 0;
    mb.n = num_tokens;
    MOE_RETURN_IF_ERROR(prepare_micro_batch(c, mb, x, routing, out));
    MOE_RETURN_IF_ERROR(issue_dispatch(c, mb));
    return run_micro_batches(c, &mb, nullptr);
  }
  // Two micro-batches: A's compute overlaps B's dispatch, B's compute overlaps A's
  // combine (with expert_tp, one's node-local gather/scatter overlaps the other's
  // cross-node exchange). Every rank issues the exchanges in the same order.
  MicroBatch& a = ws->mb[0];
  MicroBatch& b = ws->mb[1];
  a.t0 = 0;
  a.n = num_tokens / 2;
  b.t0 = a.n;
  b.n = num_tokens - a.n;
  MOE_RETURN_IF_ERROR(prepare_micro_batch(c, a, x, routing, out));
  MOE_RETURN_IF_ERROR(prepare_micro_batch(c, b, x, routing, out));
  MOE_RETURN_IF_ERROR(issue_dispatch(c, a));
  MOE_RETURN_IF_ERROR(issue_dispatch(c, b));
  return run_micro_batches(c, &a, &b);
}

Status ep_moe_begin(const MoeLayerArgs& args, const TopkRoutingView& routing, const EpStageCall& call) {
  MOE_CHECK(call.ctx != nullptr && call.ws != nullptr && (call.slot == 0 || call.slot == 1));
  const EpContext& ep = *call.ctx;
  if (ep.options.hierarchical) {
    MOE_RETURN_IF_ERROR(check_expert_tp(ep));
    return failed_precondition("ep_moe_begin: the stage-wise MoE exchange is flat only (hierarchical is set)");
  }
  check_moe_layer_args(args);
  MOE_CHECK(routing.num_tokens == args.num_tokens() && routing.num_topk == args.config.router.top_k);
  MicroBatch& mb = call.ws->mb[call.slot];
  mb.request.reset();  // a micro-batch an error left in flight is abandoned
  mb.phase = MicroBatch::Phase::kIdle;
  Ctx c = make_ctx(args.config, args.layer, ep, call.ws, call.timings);
  if (call.timings) ++call.timings->calls;
  const int64_t n = routing.num_tokens;
  if (n > 0) std::memset(args.out_data(), 0, static_cast<size_t>(n * c.hidden) * sizeof(float));
  mb.t0 = 0;
  mb.n = n;
  MOE_RETURN_IF_ERROR(prepare_micro_batch(c, mb, args.x_data(), routing, args.out_data()));
  return issue_dispatch(c, mb);
}

StatusOr<bool> ep_moe_step(const EpStageCall& call) {
  MOE_CHECK(call.ctx != nullptr && call.ws != nullptr && (call.slot == 0 || call.slot == 1));
  MicroBatch& mb = call.ws->mb[call.slot];
  if (mb.phase == MicroBatch::Phase::kIdle) {
    return failed_precondition("ep_moe_step: no micro-batch in flight in slot " + std::to_string(call.slot));
  }
  Ctx c = make_ctx(*mb.config, *mb.layer, *call.ctx, call.ws, call.timings);
  return step_micro_batch(c, mb, &call.ws->mb[1 - call.slot]);
}

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
