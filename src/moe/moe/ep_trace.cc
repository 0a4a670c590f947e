#include "moe/moe/ep_trace.h"

#include "moe/core/clock.h"

namespace moe {

void add_link_bytes(EpTimings* t, int layer, const std::vector<size_t>& sent, const std::vector<size_t>& received) {
  const size_t R = sent.size();
  if (t->bytes_to_rank.size() != R) t->bytes_to_rank.assign(R, 0);
  if (t->bytes_from_rank.size() != R) t->bytes_from_rank.assign(R, 0);
  const double now = t->trace ? now_seconds() : 0;
  for (size_t r = 0; r < R; ++r) {
    t->bytes_to_rank[r] += static_cast<int64_t>(sent[r]);
    t->bytes_from_rank[r] += static_cast<int64_t>(received[r]);
    if (t->trace) t->trace->bytes(layer, static_cast<int>(r), static_cast<int64_t>(sent[r]), now);
  }
}

void trace_wait(const EpTimings& t, const EpWaitRecord& w) {
  if (t.trace == nullptr) return;
  const int kind = static_cast<int>(w.kind);
  t.trace->span(TraceName::kWait, w.layer, w.t0, w.t1, kTraceMainLane, kind);
  t.trace->span(TraceName::kExchange, w.layer, w.issued, w.t1, 1 + w.slot, kind);
}

}  // namespace moe
