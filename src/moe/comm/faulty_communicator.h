// FaultyCommunicator: wraps one rank's Communicator and injects faults, so failure paths
// (a dead peer, a slow peer, a corrupted message, a peer that vanishes in the middle of
// a collective) can be tested in one process over InProcessGroup, or under mpirun.
//
//   InProcessGroup group(2, 0, /*timeout_seconds=*/2);
//   FaultyCommunicator rank1(group.rank(1), {.corrupt_recv_tag = kTagData});
//   // rank 1's first received point-to-point message with that tag has a byte flipped.
//
// Faults (FaultPlan; several may be set):
//  - drop: this rank is dead from the start. Every call returns Unavailable at once
//    without reaching the group, so its peers see DeadlineExceeded (vanish_after_ops = 0).
//  - vanish: after `vanish_after_ops` operations this rank stops taking part the same
//    way. Operations are counted in call order (every collective, point-to-point call and
//    ialltoallv issue counts one), so a test can stop a rank between the stages of one
//    logical exchange (e.g. after the counts all-to-all, before the payload).
//    Or at the first point-to-point call with tag `vanish_on_tag` (a dead peer in the
//    middle of an expert migration).
//  - delay: every operation first sleeps `delay_seconds` (a slow or stalled peer).
//  - corrupt: one byte is flipped in the data this rank receives, once: in the first
//    recv() whose tag equals `corrupt_recv_tag` (>= 0), and/or in the
//    `corrupt_alltoallv_index`-th (0-based) alltoallv/ialltoallv result.
// The wrapper forwards everything else unchanged (rank, size, nodes). Not thread-safe,
// like any Communicator. The wrapped communicator must outlive it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "moe/comm/communicator.h"

namespace moe {

struct FaultPlan {
  int vanish_after_ops = -1;        // -1 = never; 0 = dead from the start ("drop")
  int vanish_on_tag = -1;           // vanish at the first send()/recv() with this tag (e.g. a migration's); -1 = off
  double delay_seconds = 0;         // sleep before every operation
  int corrupt_recv_tag = -1;        // flip a byte of the first recv() with this tag; -1 = off
  int corrupt_alltoallv_index = -1; // flip a byte of this alltoallv/ialltoallv's result; -1 = off
};

// What the wrapper did so far.
struct FaultCounts {
  int64_t ops = 0;           // operations this rank issued (including refused ones)
  int64_t refused = 0;       // calls answered Unavailable because the rank is gone
  int64_t corrupted = 0;     // messages with a flipped byte
};

class FaultyCommunicator final : public Communicator {
 public:
  FaultyCommunicator(Communicator& inner, const FaultPlan& plan);

  // Changes the plan from the next operation on (the counters keep running).
  void set_plan(const FaultPlan& plan) { plan_ = plan; }
  const FaultCounts& counts() const { return counts_; }

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  int node_of(int rank) const override { return inner_.node_of(rank); }
  int num_nodes() const override { return inner_.num_nodes(); }
  std::string backend() const override { return inner_.backend() + "+faults"; }
  void set_timeout_seconds(double seconds) override { inner_.set_timeout_seconds(seconds); }
  double timeout_seconds() const override { return inner_.timeout_seconds(); }
  bool can_reform() const override { return inner_.can_reform(); }
  // A rank that has vanished cannot come back (Unavailable); reform counts as an operation.
  Status reform(double join_seconds) override;
  std::vector<int> world_ranks() const override { return inner_.world_ranks(); }

  Status alltoallv(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                   const std::vector<size_t>& recv_bytes) override;
  StatusOr<std::unique_ptr<CommRequest>> ialltoallv(const void* send, const std::vector<size_t>& send_bytes,
                                                    void* recv, const std::vector<size_t>& recv_bytes) override;
  Status alltoall_int64(const int64_t* send, int64_t* recv) override;
  Status allreduce_sum(float* data, size_t n) override;
  Status allreduce_sum(int64_t* data, size_t n) override;
  Status allgather(const void* send, size_t bytes, void* recv) override;
  Status broadcast(void* data, size_t bytes, int root) override;
  Status barrier() override;
  Status send(const void* data, size_t bytes, int dest, int tag) override;
  Status recv(void* data, size_t bytes, int source, int tag) override;

 private:
  void vanish_if_tag(int tag);
  // Counts the operation, applies the delay; Unavailable (naming `op`) once the rank is gone.
  Status enter(const char* op);
  // Flips one byte of `data` (the middle one) and counts it.
  void corrupt(void* data, size_t bytes);
  bool take_alltoallv_corruption();

  Communicator& inner_;
  FaultPlan plan_;
  FaultCounts counts_;
  int64_t alltoallv_calls_ = 0;
  bool recv_corrupted_ = false;
};

}  // namespace moe
