// The hierarchical exchange with overlap (EpOptions::overlap + hierarchical): the
// tokens split into N micro-batches; micro-batch i's expert compute runs while i+1's
// two-stage dispatch and i-1's two-stage combine are in flight.
//
// Each micro-batch is a chain of nonblocking exchanges (Communicator::ialltoallv), each
// needing the previous one's data:
//   D1 stage-1 rows -> K2 stage-2 counts (8 bytes per rank) -> D2 stage-2 rows ->
//   compute -> C2 stage-2 results -> C1 stage-1 results -> F sum into out.
// MPI matches nonblocking collectives by issue order, so every rank must issue them in
// the same order whatever its timing: the steps of all micro-batches form one fixed
// list, run in order. The driver runs it blocking (waiting for a step's input when it
// is not there yet); during a compute, the poll points between slices of experts
// (ExpertWorkspace::progress) test the exchanges in flight and run the following steps
// whose input has arrived, stopping at the first one that is not ready. The list:
//   D1(0) D1(1) K2(0) D2(0), then per i: [D1(i+1) if i >= 1] compute(i)
//   C1(i-1) K2(i+1) D2(i+1) F(i-1) C2(i); finally C1(N-1) F(N-1).
// Before them, one blocking exchange carries every micro-batch's stage-1 counts. The
// steps are the blocking form's (ep_hierarchical_detail.h) on the same rows, so the
// results are bitwise equal to it (with batch-invariant expert kernels).
#include <cstring>
#include <vector>

#include "moe/core/clock.h"
#include "moe/moe/ep_hierarchical_detail.h"
#include "moe/moe/ep_trace.h"

namespace moe {
namespace hier_detail {
namespace {

enum class Kind { kDispatch1, kCounts2, kDispatch2, kCompute, kCombine2, kCombine1, kFinish };
struct Step {
  Kind kind;
  int mb;
};

std::vector<Step> make_schedule(int n) {
  std::vector<Step> s{{Kind::kDispatch1, 0}};
  if (n > 1) s.push_back({Kind::kDispatch1, 1});
  s.push_back({Kind::kCounts2, 0});
  s.push_back({Kind::kDispatch2, 0});
  for (int i = 0; i < n; ++i) {
    if (i >= 1 && i + 1 < n) s.push_back({Kind::kDispatch1, i + 1});
    s.push_back({Kind::kCompute, i});
    if (i >= 1) s.push_back({Kind::kCombine1, i - 1});
    if (i + 1 < n) {
      s.push_back({Kind::kCounts2, i + 1});
      s.push_back({Kind::kDispatch2, i + 1});
    }
    if (i >= 1) s.push_back({Kind::kFinish, i - 1});
    s.push_back({Kind::kCombine2, i});
  }
  s.push_back({Kind::kCombine1, n - 1});
  s.push_back({Kind::kFinish, n - 1});
  return s;
}

template <typename T>
T* grow(std::vector<T>& v, size_t n) {
  if (v.size() < n + 1) v.resize(n + 1);
  return v.data();
}

class Pipeline {
 public:
  Pipeline(const HierCall& c, int n) : c_(c), n_(n), steps_(make_schedule(n)) {}

  Status run() {
    MOE_RETURN_IF_ERROR(prepare());
    while (next_ < steps_.size()) {
      const Step s = steps_[next_++];
      MOE_RETURN_IF_ERROR(run_step(s));
    }
    return ok_status();
  }

 private:
  HierBatch& mb(int i) { return c_.ws->mb[i]; }
  TraceRecorder* trace() const { return c_.timings ? c_.timings->trace : nullptr; }

  // Every micro-batch's routing check and stage-1 rows, then one blocking exchange of
  // all their stage-1 counts ([ranks][micro-batches] int64), so that a rejected routing
  // (counts of -1) fails every rank before any payload moves.
  Status prepare() {
    TraceSpan span(trace(), TraceName::kDispatch, c_.wire.layer);
    Status routing;
    for (int i = 0; i < n_ && routing.ok(); ++i) {
      HierBatch& b = mb(i);
      const int64_t num_tokens = c_.topk.num_tokens;
      b.t0 = num_tokens * i / n_;
      b.n = num_tokens * (i + 1) / n_ - b.t0;
      routing = validate_routing(c_, b);
    }
    for (int i = 0; i < n_; ++i) build_stage1(c_, mb(i), routing.ok());
    Communicator& comm = c_.comm();
    const size_t R = static_cast<size_t>(comm.size()), n = static_cast<size_t>(n_);
    std::vector<int64_t> send(R * n), recv(R * n);
    for (size_t r = 0; r < R; ++r) {
      for (size_t i = 0; i < n; ++i) send[r * n + i] = mb(static_cast<int>(i)).s1.send_count[r];
    }
    const std::vector<size_t> bytes(R, n * sizeof(int64_t));
    const double t0 = trace() ? now_seconds() : 0;
    MOE_RETURN_IF_ERROR(comm.alltoallv(send.data(), bytes, recv.data(), bytes));
    if (trace()) trace()->span(TraceName::kWait, c_.wire.layer, t0, now_seconds(), 0, int(TraceExchange::kCounts));
    if (!routing.ok()) return routing.with_context("rank " + std::to_string(comm.rank()));
    for (size_t r = 0; r < R; ++r) {
      if (recv[r * n] < 0) {
        return invalid_argument("rank " + std::to_string(r) + " rejected its routing in this step (see its error)");
      }
    }
    for (size_t i = 0; i < n; ++i) {
      std::vector<int64_t>& rc = mb(static_cast<int>(i)).s1.recv_count;
      rc.resize(R);
      for (size_t r = 0; r < R; ++r) rc[r] = recv[r * n + i];
    }
    return ok_status();
  }

  // Waits for micro-batch b's exchange in flight (at once when a poll saw it done).
  Status finish(int i, TraceExchange kind) {
    HierBatch& b = mb(i);
    if (!b.request) return internal_error("hierarchical pipeline: micro-batch " + std::to_string(i) + " has no exchange in flight");
    const double t0 = now_seconds();
    Status st = b.request->wait();
    b.request.reset();
    count_finished(c_, {c_.wire.layer, i, kind, b.started, t0, now_seconds()});
    return st;
  }

  Status issue(HierBatch& b, const void* send, const std::vector<size_t>& sb, void* recv,
               const std::vector<size_t>& rb) {
    b.started = now_seconds();
    MOE_ASSIGN_OR_RETURN(b.request, c_.comm().ialltoallv(send, sb, recv, rb));
    return ok_status();
  }

  // Issues a payload exchange of b.send (b.send_bytes) into b.recv (b.recv_bytes).
  Status issue_payload(HierBatch& b) {
    size_t total = 0;
    for (size_t v : b.recv_bytes) total += v;
    uint8_t* recv = grow(b.recv, total);
    count_issued(c_, b.send_bytes, b.recv_bytes);
    return issue(b, b.send.data(), b.send_bytes, recv, b.recv_bytes);
  }

  Status run_step(const Step& s) {
    HierBatch& b = mb(s.mb);
    switch (s.kind) {
      case Kind::kDispatch1: {
        TraceSpan span(trace(), TraceName::kDispatch, c_.wire.layer);
        dispatch_bytes(c_.wire, b.s1, &b.send_bytes, &b.recv_bytes);
        pack_stage(c_.wire, b.s1, c_.args.x_data(), &b.send);
        return issue_payload(b);
      }
      case Kind::kCounts2: {
        MOE_RETURN_IF_ERROR(finish(s.mb, TraceExchange::kDispatch));
        TraceSpan span(trace(), TraceName::kDispatch, c_.wire.layer);
        unpack_stage(c_.wire, b.s1, b.recv.data(), b);
        build_gateway_rows(c_, b);
        build_stage2(c_, b);
        const size_t R = b.s2.send_count.size();
        b.count_send = b.s2.send_count;
        b.count_recv.assign(R, 0);
        b.count_bytes.assign(R, sizeof(int64_t));
        return issue(b, b.count_send.data(), b.count_bytes, b.count_recv.data(), b.count_bytes);
      }
      case Kind::kDispatch2: {
        MOE_RETURN_IF_ERROR(finish(s.mb, TraceExchange::kCounts));
        TraceSpan span(trace(), TraceName::kDispatch, c_.wire.layer);
        b.s2.recv_count = b.count_recv;
        dispatch_bytes(c_.wire, b.s2, &b.send_bytes, &b.recv_bytes);
        pack_stage(c_.wire, b.s2, b.gw_x.data(), &b.send);
        return issue_payload(b);
      }
      case Kind::kCompute:
        return compute(s.mb);
      case Kind::kCombine2: {
        TraceSpan span(trace(), TraceName::kCombine, c_.wire.layer);
        combine_bytes(c_.wire, b.s2, &b.send_bytes, &b.recv_bytes);
        pack_results(c_.wire, b.y.data(), b.s2.num_recv, &b.send);
        return issue_payload(b);
      }
      case Kind::kCombine1: {
        MOE_RETURN_IF_ERROR(finish(s.mb, TraceExchange::kCombine));
        TraceSpan span(trace(), TraceName::kCombine, c_.wire.layer);
        float* gout = zero_gateway_out(c_, b);
        accumulate_results(c_, b.s2, b.recv.data(), gout);
        combine_bytes(c_.wire, b.s1, &b.send_bytes, &b.recv_bytes);
        pack_results(c_.wire, gout + static_cast<int64_t>(b.own_rows) * c_.wire.hidden, b.s1.num_recv, &b.send);
        return issue_payload(b);
      }
      case Kind::kFinish: {
        MOE_RETURN_IF_ERROR(finish(s.mb, TraceExchange::kCombine));
        TraceSpan span(trace(), TraceName::kCombine, c_.wire.layer);
        add_own_rows(c_, b, c_.args.out_data());
        accumulate_results(c_, b.s1, b.recv.data(), c_.args.out_data());
        return ok_status();
      }
    }
    return internal_error("hierarchical pipeline: unknown step");
  }

  Status compute(int i) {
    HierBatch& b = mb(i);
    MOE_RETURN_IF_ERROR(finish(i, TraceExchange::kDispatch));
    unpack_stage(c_.wire, b.s2, b.recv.data(), b);
    MOE_RETURN_IF_ERROR(check_stage2_experts(c_, b));
    computing_ = i;
    c_.ws->experts.progress = [this] { poll(); };
    poll();
    compute_experts(c_, b);
    c_.ws->experts.progress = nullptr;
    computing_ = -1;  // C2(i) may run now
    poll();
    return deferred_;
  }

  // Whether step s can run without blocking.
  bool ready(const Step& s) {
    if (s.kind == Kind::kCompute) return false;
    if (s.kind == Kind::kCombine2) return s.mb != computing_;
    if (s.kind == Kind::kDispatch1) return true;
    HierBatch& b = mb(s.mb);
    if (!b.request) return true;
    StatusOr<bool> done = b.request->test();
    return !done.ok() || *done;  // an error is reported by the step's wait
  }

  // A poll point: test the exchanges in flight (MPI moves them only inside its calls)
  // and run the next steps in order while their inputs are there.
  void poll() {
    for (int i = 0; i < n_; ++i) {
      if (mb(i).request) (void)mb(i).request->test();
    }
    while (deferred_.ok() && next_ < steps_.size() && ready(steps_[next_])) {
      const Step s = steps_[next_++];
      deferred_ = run_step(s);
    }
  }

  const HierCall& c_;
  const int n_;
  const std::vector<Step> steps_;
  size_t next_ = 0;     // the next step to run
  int computing_ = -1;  // the micro-batch whose experts run now (-1: none)
  Status deferred_;     // the first error of a step run at a poll point
};

}  // namespace

Status hierarchical_pipeline(const HierCall& c, int n_mb) {
  Pipeline p(c, n_mb);
  Status st = p.run();
  c.ws->experts.progress = nullptr;
  return st;
}

}  // namespace hier_detail
}  // namespace moe
