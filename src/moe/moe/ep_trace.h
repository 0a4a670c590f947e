// The EP layer's trace and per-link hooks (internal to moe/): what ep_moe_layer.cc
// records into EpTimings and its TraceRecorder after each exchange.
#pragma once

#include <cstddef>
#include <vector>

#include "moe/moe/ep_moe_layer.h"

namespace moe {

// One exchange's bytes per rank (sent[r] to rank r, received[r] from it) added to
// t->bytes_to_rank / bytes_from_rank (sized on first use), and to the trace when on.
void add_link_bytes(EpTimings* t, int layer, const std::vector<size_t>& sent, const std::vector<size_t>& received);

// A finished wait: blocked [t0, t1] on an exchange issued at `issued`, in flight on
// micro-batch `slot`'s lane; no-op when tracing is off.
struct EpWaitRecord {
  int layer = -1;
  int slot = 0;
  TraceExchange kind = TraceExchange::kOther;
  double issued = 0, t0 = 0, t1 = 0;
};
void trace_wait(const EpTimings& t, const EpWaitRecord& w);

}  // namespace moe
