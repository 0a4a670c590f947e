#include "moe/trace/trace_gather.h"

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <limits>
#include <vector>

#include "moe/core/atomic_file.h"

namespace moe {

namespace {

std::string document(const std::string& events, int ranks, const std::vector<int64_t>& dropped) {
  std::string out = R"({"traceEvents":[)" + events + R"(],"displayTimeUnit":"ms","otherData":{"format":"moe-trace","version":1,"ranks":)" +
                    std::to_string(ranks) + R"(,"dropped_events":[)";
  for (size_t i = 0; i < dropped.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(dropped[i]);
  }
  return out + "]}}\n";
}

double first_time(const TraceRecorder& r) {
  double t = std::numeric_limits<double>::infinity();
  for (const TraceEvent& e : r.events()) t = std::min(t, e.t0);
  return t;
}

}  // namespace

StatusOr<std::string> gather_trace_json(Communicator* comm, const TraceRecorder& local) {
  if (comm == nullptr || comm->size() == 1) {
    const double t = first_time(local);
    return document(local.events_json(std::isinf(t) ? 0.0 : t), 1, {local.dropped_events()});
  }
  const size_t R = static_cast<size_t>(comm->size());
  // The common origin: the earliest first event of any rank.
  const double mine = first_time(local);
  std::vector<double> firsts(R);
  MOE_RETURN_IF_ERROR(comm->allgather(&mine, sizeof(double), firsts.data()));
  double origin = std::numeric_limits<double>::infinity();
  for (double t : firsts) origin = std::min(origin, t);
  if (std::isinf(origin)) origin = 0;
  const std::string events = local.events_json(origin);
  const int64_t sizes_mine[2] = {static_cast<int64_t>(events.size()), local.dropped_events()};
  std::vector<int64_t> sizes(2 * R);
  MOE_RETURN_IF_ERROR(comm->allgather(sizes_mine, sizeof(sizes_mine), sizes.data()));
  const bool root = comm->rank() == 0;
  std::vector<size_t> send_bytes(R, 0), recv_bytes(R, 0);
  send_bytes[0] = events.size();
  size_t total = 0;
  if (root) {
    for (size_t r = 0; r < R; ++r) {
      recv_bytes[r] = static_cast<size_t>(sizes[2 * r]);
      total += recv_bytes[r];
    }
  }
  std::string all(total, '\0');
  MOE_RETURN_IF_ERROR(comm->alltoallv(events.data(), send_bytes, all.data(), recv_bytes));
  if (!root) return std::string();
  // Join the ranks' event lists with commas.
  std::string joined;
  joined.reserve(total + R);
  size_t at = 0;
  std::vector<int64_t> dropped(R);
  for (size_t r = 0; r < R; ++r) {
    if (r > 0 && recv_bytes[r] > 0 && !joined.empty()) joined += ',';
    joined.append(all, at, recv_bytes[r]);
    at += recv_bytes[r];
    dropped[r] = sizes[2 * r + 1];
  }
  return document(joined, static_cast<int>(R), dropped);
}

Status write_trace_file(Communicator* comm, const TraceRecorder& local, const std::string& path) {
  MOE_ASSIGN_OR_RETURN(const std::string doc, gather_trace_json(comm, local));
  if (comm != nullptr && comm->rank() != 0) return ok_status();
  Status st = write_file_atomically(path, doc);
  if (!st.ok()) return internal_error("cannot write the trace file " + path + ": " + st.message());
  return ok_status();
}

}  // namespace moe
