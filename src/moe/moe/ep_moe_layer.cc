#include "moe/moe/ep_moe_layer.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>

#include "moe/core/check.h"
#include "moe/core/clock.h"
#include "moe/moe/ep_hierarchical.h"
#include "moe/moe/ep_trace.h"
#include "moe/moe/ep_workspace.h"
#include "moe/moe/ep_wire.h"
#include "moe/moe/router.h"
#include "moe/placement/replica_choice.h"
#include "moe/tensor/dtype.h"

namespace moe {

using ep_detail::MicroBatch;

void EpWorkspaceDeleter::operator()(EpWorkspace* ws) const { delete ws; }

namespace ep_detail {

Status check_expert_tp(const EpContext& ep) {
  if (ep.expert_tp != nullptr && ep.options.hierarchical) {
    return failed_precondition(
        "the hierarchical all-to-all cannot be combined with tensor-parallel experts (EpContext::expert_tp): the EP "
        "group has one rank per node, so there is nothing to forward inside a node; use the flat exchange");
  }
  return ok_status();
}

}  // namespace ep_detail

using ep_detail::check_expert_tp;

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
    if (ctx.options.overlap) {  // two micro-batches' worth; more (micro_batches > 2) grow on first use
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

// The exchanges in flight during a micro-batch's compute (null: none), polled so that
// they progress meanwhile (MPI's nonblocking exchanges move only inside MPI calls).
struct Pending {
  MicroBatch* mb[2] = {nullptr, nullptr};
  void poke() const {
    for (MicroBatch* m : mb) {
      if (m != nullptr && m->request) (void)m->request->test();
    }
  }
};

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
// With exchanges pending they are polled before, during (between groups of experts:
// ExpertWorkspace::progress) and after the compute.
void compute_rows(Ctx& c, MicroBatch& mb, int64_t n, float* y, const Pending& pending) {
  pending.poke();
  const bool any = pending.mb[0] != nullptr || pending.mb[1] != nullptr;
  if (any) c.ws->experts.progress = [&pending] { pending.poke(); };
  const double t0 = now_seconds();
  grouped_expert_ffn(MoeLayerArgs::f32(c.config, c.layer, mb.recv_x.data(), n, y),
                     TopkRoutingView{mb.recv_e.data(), mb.recv_w.data(), n, c.top_k}, &c.ws->experts);
  const double t1 = now_seconds();
  if (c.timings) c.timings->compute_seconds += t1 - t0;
  if (c.timings && c.timings->trace) c.timings->trace->span(TraceName::kExpertCompute, c.ep.layer_id, t0, t1);
  c.ws->experts.progress = nullptr;
  pending.poke();
}

// Unpacks the dispatched rows (the exchange done) and computes them.
Status unpack_and_compute(Ctx& c, MicroBatch& mb, const Pending& pending) {
  const int64_t n = mb.num_recv;
  MOE_RETURN_IF_ERROR(unpack_rows(c, mb, mb.recv_buf.data(), n));
  compute_rows(c, mb, n, grow(mb.y, static_cast<size_t>(n * c.hidden) + 1), pending);
  return ok_status();
}

Status finish_dispatch_and_compute(Ctx& c, MicroBatch& mb, MicroBatch* other) {
  MOE_RETURN_IF_ERROR(wait_request(c, mb));
  return unpack_and_compute(c, mb, Pending{{other, nullptr}});
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
  compute_rows(c, mb, n, y, Pending{{other, nullptr}});
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

// N >= 2 micro-batches, pipelined (flat exchange, no expert_tp): micro-batch i's
// compute runs while i+1's dispatch and i-1's combine are in flight. Every rank issues
// the exchanges in the same order: d0, then per i: d(i+1), c(i); c(i-1) is waited on
// after c(i) is issued.
Status run_pipeline(Ctx& c, MicroBatch* mbs, int n) {
  MOE_RETURN_IF_ERROR(issue_dispatch(c, mbs[0]));
  for (int i = 0; i < n; ++i) {
    MicroBatch& mb = mbs[i];
    MOE_RETURN_IF_ERROR(wait_request(c, mb));
    MicroBatch* next = i + 1 < n ? &mbs[i + 1] : nullptr;
    MicroBatch* prev = i > 0 ? &mbs[i - 1] : nullptr;
    if (next != nullptr) MOE_RETURN_IF_ERROR(issue_dispatch(c, *next));
    MOE_RETURN_IF_ERROR(unpack_and_compute(c, mb, Pending{{next, prev}}));
    MOE_RETURN_IF_ERROR(start_combine(c, mb));
    if (prev != nullptr) MOE_RETURN_IF_ERROR(finish_combine(c, *prev, prev->out));
  }
  return finish_combine(c, mbs[n - 1], mbs[n - 1].out);
}

// Tokens per micro-batch that the automatic choice aims at.
constexpr int64_t kAutoTokensPerMicroBatch = 64;

}  // namespace

// The number of micro-batches of this call (the same on every rank).
StatusOr<int> ep_detail::micro_batch_count(const EpContext& ep, int64_t num_tokens) {
  const int fixed = ep.options.micro_batches;
  if (fixed != 0 && (fixed < 2 || fixed > kMaxEpMicroBatches)) {
    return invalid_argument("EpOptions.micro_batches must be 0 (auto) or 2.." + std::to_string(kMaxEpMicroBatches) +
                            " (got " + std::to_string(fixed) + ")");
  }
  if (ep.expert_tp != nullptr) return 2;
  if (fixed != 0) return fixed;
  int64_t total = num_tokens;
  MOE_RETURN_IF_ERROR(ep.comm->allreduce_sum(&total, 1));
  const int64_t per_rank = total / std::max(1, ep.comm->size());
  return static_cast<int>(std::clamp<int64_t>(per_rank / kAutoTokensPerMicroBatch, 2, kMaxEpMicroBatches));
}

double EpTimings::comm_overlap_ratio() const {
  if (exchange_seconds <= 0) return 0;
  return std::clamp(1.0 - comm_wait_seconds / exchange_seconds, 0.0, 1.0);
}

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
  MOE_ASSIGN_OR_RETURN(const int n_mb, ep_detail::micro_batch_count(ep, num_tokens));
  if (ep.expert_tp != nullptr) {
    // Two micro-batches, stage by stage: one's node-local gather/scatter and compute
    // overlap the other's cross-node exchange. Every rank issues the exchanges in the
    // same order.
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
  // Micro-batch i: tokens [i * num_tokens / n, (i + 1) * num_tokens / n).
  for (int i = 0; i < n_mb; ++i) {
    MicroBatch& mb = ws->mb[i];
    mb.t0 = num_tokens * i / n_mb;
    mb.n = num_tokens * (i + 1) / n_mb - mb.t0;
    MOE_RETURN_IF_ERROR(prepare_micro_batch(c, mb, x, routing, out));
  }
  return run_pipeline(c, ws->mb, n_mb);
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

}  // namespace moe
