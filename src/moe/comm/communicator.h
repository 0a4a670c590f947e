// Communicator: the collective operations expert parallelism needs, over a group of
// ranks (processes under MPI, or threads in one process for tests).
//
// Backends: make_mpi_communicator() (Open MPI; comm/mpi_communicator.h),
// GlooCommunicator (TCP; survivors re-form after a peer dies; comm/gloo_communicator.h)
// and InProcessGroup (N threads sharing memory; comm/inproc_communicator.h).
// All errors are Status values: a dead or missing peer becomes Unavailable or
// DeadlineExceeded after `timeout_seconds`, never a hang. On error, output buffers
// hold unspecified data. One Communicator is used by one thread at a time.
//
// Every rank must call the collectives in the same order with agreeing arguments
// (sizes, root). Send and receive buffers must not overlap. After a collective
// times out the communicator is broken: the peers can no longer be matched up, so
// every later call returns Unavailable (treat it as fatal; under MPI, mpi_abort()).
// A timed-out recv() does not break it (the receive is cancelled).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "moe/status.h"

namespace moe {

// An operation in flight; wait() until it completes or times out.
class CommRequest {
 public:
  virtual ~CommRequest() = default;
  // Blocks until complete. DeadlineExceeded once the communicator's timeout has
  // passed since the operation was issued. Returns the same result when called again.
  // Destroying an incomplete request waits for it. The Communicator must outlive it.
  virtual Status wait() = 0;
  // Non-blocking progress check: true once complete (then wait() returns at once);
  // DeadlineExceeded once the timeout has passed with the operation incomplete.
  virtual StatusOr<bool> test() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Node (machine) of each rank: real (shared-memory split) or emulated
  // (ranks_per_node). node_of(r) in [0, num_nodes()).
  virtual int node_of(int rank) const = 0;
  virtual int num_nodes() const = 0;
  // Human-readable backend name, e.g. "mpi" or "inproc".
  virtual std::string backend() const = 0;
  // The deadline of each operation issued from now on, in seconds (finite, > 0): start-up
  // (loading skew between ranks) gets a longer one than steady serving. Call it between
  // operations; in-process groups share one value (the last set by any rank).
  virtual void set_timeout_seconds(double seconds) = 0;
  virtual double timeout_seconds() const = 0;

  // Asymmetric all-to-all of bytes.
  //   send: concatenation of the blocks for ranks 0..size-1; send_bytes[r] bytes for r
  //   recv: room for sum(recv_bytes); recv_bytes[r] bytes arrive from r, in rank order
  // Counts must agree pairwise (send_bytes[j] on i == recv_bytes[i] on j).
  virtual Status alltoallv(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                           const std::vector<size_t>& recv_bytes) = 0;
  // Nonblocking variant; buffers must stay valid until the request completes.
  virtual StatusOr<std::unique_ptr<CommRequest>> ialltoallv(const void* send, const std::vector<size_t>& send_bytes,
                                                            void* recv, const std::vector<size_t>& recv_bytes) = 0;

  // Every rank sends one int64 to every rank: recv[r] = what rank r had in send[rank()].
  // send, recv: [size] values. (The counts exchange before a payload alltoallv.)
  virtual Status alltoall_int64(const int64_t* send, int64_t* recv) = 0;
  // Element-wise sum over ranks, in place: data [n] f32 or int64.
  virtual Status allreduce_sum(float* data, size_t n) = 0;
  virtual Status allreduce_sum(int64_t* data, size_t n) = 0;
  // recv: [size * bytes]; block r holds rank r's `bytes` bytes.
  virtual Status allgather(const void* send, size_t bytes, void* recv) = 0;
  virtual Status broadcast(void* data, size_t bytes, int root) = 0;
  virtual Status barrier() = 0;

  // Reduce-scatter of f32 sums: send [size() * count] (block r goes to rank r); recv
  // [count] = the sum over ranks of their block rank(). Tensor parallelism's
  // row-parallel output. Default: one alltoallv and a local sum (backends may override).
  virtual Status reduce_scatter_sum(const float* send, float* recv, size_t count);

  // Sub-groups (tensor and expert parallelism, comm/parallel_groups.h): collective over
  // this communicator; the ranks that pass the same `color` (>= 0) form one new
  // communicator, ordered by (key, rank here). The child has this one's timeout, and
  // node_of() of its members as here, renumbered 0.. in order of first appearance. The
  // child is independent: its operations never match this one's; destroy it before
  // this one. Errors: communication; FailedPrecondition for a backend that cannot split.
  virtual StatusOr<std::unique_ptr<Communicator>> split(int color, int key) {
    (void)color;
    (void)key;
    return failed_precondition("the " + backend() + " communicator cannot be split into sub-groups");
  }

  // Point-to-point, for moving expert weights between ranks. Messages from one
  // source with one tag arrive in order; recv() needs exactly `bytes` bytes (else
  // InvalidArgument) and tag >= 0; dest/source != rank() (copy locally instead).
  // send() may return before the receiver has the data (small messages are buffered).
  virtual Status send(const void* data, size_t bytes, int dest, int tag) = 0;
  virtual Status recv(void* data, size_t bytes, int source, int tag) = 0;

  // Re-forming after a peer's failure (backends that can: Gloo, comm/gloo_communicator.h).
  // Every survivor calls reform() after an operation failed (Unavailable or
  // DeadlineExceeded); on success this object stays, with the survivors' rank() and size().
  // An error means this rank is out (it must exit). Others: FailedPrecondition.
  virtual bool can_reform() const { return false; }
  virtual Status reform(double join_seconds) {
    (void)join_seconds;
    return failed_precondition("the " + backend() + " communicator cannot re-form after a failure");
  }
  // World rank (rank at creation) of each current rank: 0..size-1 until a reform.
  virtual std::vector<int> world_ranks() const {
    std::vector<int> w(static_cast<size_t>(size()));
    for (int r = 0; r < size(); ++r) w[static_cast<size_t>(r)] = r;
    return w;
  }
};

}  // namespace moe
