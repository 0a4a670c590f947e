// Raw-MPI baselines for `moe bench a2a`: what a simple expert-parallel implementation
// would do with plain MPI on MPI_COMM_WORLD (blocking MPI_Alltoallv of fixed-size rows),
// and the world-wide reductions the benchmark uses to agree on its numbers. Everything
// else in the engine goes through Communicator (communicator.h); these exist so the
// benchmark can compare against MPI itself without calling MPI from tools/.
//
// Preconditions: mpi_init() (mpi_communicator.h) succeeded; every function is
// collective over MPI_COMM_WORLD (every rank calls it, in the same order) unless noted,
// and must be called from the thread that initialised MPI. MPI errors come back as
// Status values naming the MPI call (MPI_COMM_WORLD has MPI_ERRORS_RETURN).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "moe/status.h"

namespace moe {

// This process's rank in MPI_COMM_WORLD and the world's size (not collective).
int mpi_world_rank();
int mpi_world_size();

// In-place reductions over all ranks of MPI_COMM_WORLD.
Status mpi_world_max(std::vector<double>* values);  // element-wise max
Status mpi_world_max(double* value);
Status mpi_world_sum(std::vector<int64_t>* values);  // element-wise sum
Status mpi_world_sum(int64_t* value);
// Rank 0's *value on every rank (MPI_Bcast).
Status mpi_world_broadcast(int* value);
// MPI_Barrier on MPI_COMM_WORLD.
Status mpi_world_barrier();

// An all-to-all of fixed-size rows through plain blocking MPI on MPI_COMM_WORLD, in
// both directions: dispatch rows of `dispatch_row_bytes` go to each rank, combine rows
// of `combine_row_bytes` come back (one per dispatched row). Rows are grouped by
// destination (send) and by source (receive), in rank order. Not thread-safe.
class MpiRowExchange {
 public:
  // send_counts: [world size] rows to each rank. Learns the receive counts with one
  // MPI_Alltoall. InvalidArgument when send_counts' size is not the world size, a
  // count is negative, a row size is < 1 or above INT_MAX bytes, or a prefix sum of
  // rows overflows int (MPI's counts).
  static StatusOr<std::unique_ptr<MpiRowExchange>> create(const std::vector<int>& send_counts,
                                                          int64_t dispatch_row_bytes, int64_t combine_row_bytes);
  ~MpiRowExchange();
  MpiRowExchange(const MpiRowExchange&) = delete;
  MpiRowExchange& operator=(const MpiRowExchange&) = delete;

  // Rows this rank sends in the dispatch (sum of send_counts) and receives.
  int64_t num_send_rows() const { return send_displs_.back(); }
  int64_t num_recv_rows() const { return recv_displs_.back(); }
  // [world size + 1] prefix sums of the send counts: rows to rank r start at row
  // send_displs()[r] of the dispatch send buffer.
  const std::vector<int>& send_displs() const { return send_displs_; }

  // One step as a real exchange does it: the counts again (MPI_Alltoall, since a step
  // cannot know them in advance), then the dispatch MPI_Alltoallv
  //   dispatch_send [num_send_rows, dispatch_row_bytes] -> dispatch_recv [num_recv_rows, ...]
  // and the combine MPI_Alltoallv back
  //   combine_send [num_recv_rows, combine_row_bytes] -> combine_recv [num_send_rows, ...].
  // Buffers are the caller's and must hold those sizes. Collective.
  Status exchange(const void* dispatch_send, void* dispatch_recv, const void* combine_send, void* combine_recv);

 private:
  struct Types;  // the two committed MPI row datatypes
  MpiRowExchange() = default;
  std::vector<int> send_counts_, recv_counts_, probe_counts_;
  std::vector<int> send_displs_, recv_displs_;
  std::unique_ptr<Types> types_;
};

}  // namespace moe
