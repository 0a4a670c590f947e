// The Gloo backend of Communicator (Debian libgloo-dev, TCP transport): the backend whose
// survivors keep working after a peer dies (level 1 of docs/reliability.md).
//
// Usage (one process per rank, or one thread per rank in tests):
//   GlooOptions o;
//   o.store_dir = "/tmp/job42-store";   // shared by all ranks, empty at the start of the job
//   MOE_ASSIGN_OR_RETURN(auto comm, GlooCommunicator::create(rank, size, o));
//   Status s = comm->allreduce_sum(data, n);
//   if (s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded) {
//     MOE_RETURN_IF_ERROR(comm->reform(/*join_seconds=*/1));  // error: this rank must exit
//     // comm->rank() / size() / world_ranks() now describe the survivors.
//   }
//
// Rendezvous: through a gloo FileStore in `store_dir` (a directory every rank can reach:
// one machine, or a shared file system), keys of generation g under the prefix "gen<g>".
// Keys are write-once: a directory left from an earlier job makes create() fail, so give
// each job a fresh one (the caller creates and removes it).
//
// Failures: every operation is bounded by timeout_seconds and never hangs. A peer whose
// process died (its sockets closed) makes the operations that involve it fail at once
// with Unavailable ("Connection closed by peer"); a stalled peer (SIGSTOP) makes them
// fail with DeadlineExceeded after the timeout. A rank whose operation failed closes
// all its connections at once, so its other peers' operations fail in turn within
// milliseconds (Unavailable): every survivor learns of a death at its next operation,
// of a stall within about one timeout. After a failure the communicator is broken
// (every call returns Unavailable, without touching the network) until reform().
// Unlike the MPI backend, a timed-out recv() breaks it too. Gloo's exceptions never
// escape: each becomes a Status naming the operation and, where known, the peer rank.
//
// Semantics the MPI backend does not share:
//  - ialltoallv() runs the exchange before returning and hands back a completed
//    request: no overlap of communication with computation on Gloo.
//  - send() returns once the receiver has taken the data (nothing is buffered): a send
//    waits for the matching recv. Both sides must walk their transfers in one order.
//  - allreduce_sum: gloo's ring allreduce; every rank gets bit-identical results (each
//    element is summed on one rank and copied to the others), but the summation order
//    of f32 differs from MPI's.
//
// Threading: one thread at a time per communicator (gloo runs its own I/O thread).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "moe/comm/communicator.h"
#include "moe/status.h"

namespace moe {

struct GlooOptions {
  std::string store_dir;                // FileStore directory shared by all ranks (rendezvous); required
  std::string hostname = "127.0.0.1";   // address this rank's TCP transport listens on
  int ranks_per_node = 0;               // emulated nodes: node of world rank w = w / K; 0 = one node
  double timeout_seconds = 60;          // every operation; set_timeout_seconds() changes it
};

class GlooCommunicator final : public Communicator {
 public:
  // Rendezvous of `size` ranks, generation 0; every rank calls it with the same size and
  // store_dir (created if missing). Errors: InvalidArgument naming the field (rank, size,
  // store_dir, hostname, ranks_per_node, timeout_seconds); DeadlineExceeded if the peers
  // do not show up within timeout_seconds; Unavailable/Internal for other transport or
  // store failures (e.g. keys left in store_dir by an earlier job).
  static StatusOr<std::unique_ptr<GlooCommunicator>> create(int rank, int size, const GlooOptions& options);
  ~GlooCommunicator() override;
  GlooCommunicator(const GlooCommunicator&) = delete;
  GlooCommunicator& operator=(const GlooCommunicator&) = delete;

  int rank() const override;
  int size() const override;
  // Nodes follow the world ranks: node of world rank w is w / ranks_per_node, numbered
  // densely over the nodes that still have ranks (all 0 with ranks_per_node = 0).
  int node_of(int rank) const override;
  int num_nodes() const override;
  std::string backend() const override { return "gloo"; }
  void set_timeout_seconds(double seconds) override;
  double timeout_seconds() const override;

  Status alltoallv(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                   const std::vector<size_t>& recv_bytes) override;
  // Completes before returning (see above); the request's wait() returns that result.
  StatusOr<std::unique_ptr<CommRequest>> ialltoallv(const void* send, const std::vector<size_t>& send_bytes,
                                                    void* recv, const std::vector<size_t>& recv_bytes) override;
  Status alltoall_int64(const int64_t* send, int64_t* recv) override;
  Status allreduce_sum(float* data, size_t n) override;
  Status allreduce_sum(int64_t* data, size_t n) override;
  Status allgather(const void* send, size_t bytes, void* recv) override;
  Status broadcast(void* data, size_t bytes, int root) override;
  Status barrier() override;
  // tag >= 0; a message of another size than `bytes` is received (and dropped)
  // and recv() returns InvalidArgument, keeping both sides in step.
  Status send(const void* data, size_t bytes, int dest, int tag) override;
  Status recv(void* data, size_t bytes, int source, int tag) override;

  // Re-forms the group in place after a failure; every survivor calls it. Current rank 0
  // coordinates: it checks in ("gen<g+1>/alive/<world rank>"), waits up to join_seconds
  // for the other current members (returns early once all have), and writes the member
  // list "gen<g+1>/members"; every other survivor checks in and waits (up to join_seconds
  // + timeout) for that list. Then all rendezvous a new gloo context under the prefix
  // "gen<g+1>", ranks renumbered in world-rank order (rank 0 stays rank 0).
  // join_seconds: how long a survivor may take to notice the failure and call reform()
  // after rank 0 did; a failing rank closes its connections, so survivors blocked in an
  // operation notice within milliseconds, but one busy computing notices only at its
  // next operation: allow at least one step's compute time.
  // Errors: Unavailable if no list came in time or this rank is not in it (it must exit);
  // DeadlineExceeded if the new rendezvous does not complete within the timeout;
  // InvalidArgument for join_seconds not finite or < 0. After an error the communicator
  // is unusable (every call returns Unavailable).
  bool can_reform() const override { return true; }
  Status reform(double join_seconds) override;
  int generation() const;
  // World rank (rank in generation 0) of each current rank.
  std::vector<int> world_ranks() const override;

 private:
  struct State;
  explicit GlooCommunicator(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

}  // namespace moe
