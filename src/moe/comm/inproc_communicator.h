// InProcessGroup: a Communicator backend of N ranks as N threads of one process.
//
// For tests, and for single-process runs of multi-rank code. Collectives rendezvous
// through shared state (one mutex + condition variable) and copy directly between the
// ranks' buffers. The k-th collective a rank issues matches the k-th of every other
// rank (as in MPI): each rank posts its buffers for operation k, waits until every
// rank has posted (rendezvous 1), pulls what it needs from the others, then waits
// until every rank has finished pulling (rendezvous 2) so that no buffer is released
// or reused while a peer still reads it. Every wait is bounded by the group's timeout:
// a rank that never calls makes the others return DeadlineExceeded naming the
// operation and the missing ranks, and breaks the group (later calls: Unavailable).
//
// Nonblocking ialltoallv: issuing it posts the buffers; the pull and rendezvous 2 run
// in test()/wait(). Any number may be outstanding, interleaved with blocking
// collectives; like an MPI library, a rank blocked in any wait also progresses its
// other outstanding operations, so "rank 0 waits on its request while rank 1 is in the
// next barrier" completes rather than deadlocking.
//
// Mismatched calls (different operations, or disagreeing sizes/roots/counts on
// different ranks) return InvalidArgument on every rank instead of corrupting data.
// send() copies into a mailbox and returns at once; recv() waits for the match.
// split() makes child groups (their own shared state) that keep the members' nodes.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "moe/comm/communicator.h"
#include "moe/status.h"

namespace moe {

namespace inproc_detail {
struct GroupState;
class InProcCommunicator;
}  // namespace inproc_detail

class InProcessGroup {
 public:
  // num_ranks >= 1; ranks_per_node: 0 = all ranks on one node, K > 0 = nodes of K
  // consecutive ranks (the last may be smaller); timeout_seconds > 0 bounds each wait.
  explicit InProcessGroup(int num_ranks, int ranks_per_node = 0, double timeout_seconds = 30);
  ~InProcessGroup();
  InProcessGroup(const InProcessGroup&) = delete;
  InProcessGroup& operator=(const InProcessGroup&) = delete;

  int size() const;
  // The communicator of rank r (0 <= r < size()); use it from one thread at a time.
  Communicator& rank(int r);

 private:
  std::shared_ptr<inproc_detail::GroupState> state_;
  std::vector<std::unique_ptr<inproc_detail::InProcCommunicator>> comms_;
};

// Runs fn(group.rank(r)) on one thread per rank and joins them all. Returns OK, or the
// first error to occur (in time), prefixed with "rank R: ". An exception escaping fn
// becomes Internal.
Status run_ranks(InProcessGroup& group, std::function<Status(Communicator&)> fn);

}  // namespace moe
