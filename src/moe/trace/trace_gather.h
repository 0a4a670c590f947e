// The trace file of `--trace FILE`: every rank's TraceRecorder gathered to rank 0 over
// the communicator at the end of the run (one merged file, written by rank 0; no
// per-rank files). Format: Chrome trace-event JSON (docs/tracing.md):
//   {"traceEvents": [...], "displayTimeUnit": "ms",
//    "otherData": {"format": "moe-trace", "version": 1, "ranks": R,
//                  "dropped_events": [per rank]}}
// pid = rank; ts/dur in microseconds from the earliest event of any rank. Ranks on one
// host share the steady clock; ranks on different hosts are aligned only up to their
// clocks' offset (the summary's wait attribution uses per-rank durations, which are
// unaffected).
#pragma once

#include <string>

#include "moe/comm/communicator.h"
#include "moe/status.h"
#include "moe/trace/trace_recorder.h"

namespace moe {

// Collective on `comm` (every rank calls it once, at the same point): rank 0 gets the
// whole document, the other ranks "". `comm` null: this process's document alone.
// Errors: the communicator's.
StatusOr<std::string> gather_trace_json(Communicator* comm, const TraceRecorder& local);

// gather_trace_json(), then rank 0 writes the document to `path` atomically (Internal
// naming the path on failure; the other ranks' statuses do not see that failure).
Status write_trace_file(Communicator* comm, const TraceRecorder& local, const std::string& path);

}  // namespace moe
