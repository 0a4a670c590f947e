// The MPI backend of Communicator (Open MPI; any MPI-3 library should do).
//
// Usage (a program started with mpirun):
//   MOE_RETURN_IF_ERROR(mpi_init(&argc, &argv));
//   MOE_ASSIGN_OR_RETURN(auto comm, make_mpi_communicator(MpiOptions{}));
//   ... comm->alltoallv(...) ...
//   comm.reset(); mpi_finalize();
//
// Threading: MPI runs at MPI_THREAD_FUNNELED, so every MPI call, including the
// communicator's methods and its destruction, must come from the thread that
// called mpi_init().
//
// Never hangs on a missing peer: every operation, blocking ones included, is issued
// in its nonblocking form (MPI_Ialltoallv, MPI_Iallreduce, MPI_Isend, ...) and
// completed by an MPI_Test loop with a deadline (timeout_seconds), returning
// DeadlineExceeded. The communicator (a duplicate of MPI_COMM_WORLD) has
// MPI_ERRORS_RETURN; each MPI error becomes a Status naming the operation with
// MPI_Error_string's text. A timed-out recv() is cancelled; after any other timeout
// the communicator is unusable (Unavailable), and MPI may still write into that
// operation's buffers later: treat it as fatal (mpi_abort()).
//
// Counts: MPI takes int counts, so a single block, message or element count above
// INT_MAX is InvalidArgument; with A2aAlgo::kMpiAlltoallv the byte displacements
// (prefix sums of the counts) must fit in int as well (kPairwise has no such limit).
#pragma once

#include <memory>

#include "moe/comm/communicator.h"
#include "moe/status.h"

namespace moe {

// How alltoallv / ialltoallv move the data.
enum class A2aAlgo {
  kMpiAlltoallv,  // one MPI_Ialltoallv (the MPI library picks the algorithm)
  kPairwise,      // MPI_Irecv + MPI_Isend per peer with bytes (zero-byte blocks skipped), memcpy to self
};

struct MpiOptions {
  // 0: real nodes, from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED); K > 0: emulated
  // nodes of K consecutive ranks (node_of(r) = r / K).
  int ranks_per_node = 0;
  // Bound on each operation, from the call (or ialltoallv's issue) to completion.
  double timeout_seconds = 60;
  A2aAlgo a2a_algo = A2aAlgo::kPairwise;  // faster in moe bench a2a (docs/performance.md)
};

// MPI_Init_thread(MPI_THREAD_FUNNELED) and MPI_ERRORS_RETURN on MPI_COMM_WORLD.
// Idempotent: OK if MPI is already initialized. FailedPrecondition after finalize.
Status mpi_init(int* argc, char*** argv);
// MPI_Finalize if initialized and not yet finalized; otherwise OK. Destroy every
// communicator first.
Status mpi_finalize();
// True when this process was started by an MPI launcher (OMPI_COMM_WORLD_SIZE or
// PMI_SIZE set), i.e. making an MPI communicator is meaningful.
bool launched_under_mpi();
// Kills the whole MPI job (MPI_Abort on MPI_COMM_WORLD) or, without MPI, this process.
[[noreturn]] void mpi_abort(int code);

// A communicator over all ranks of MPI_COMM_WORLD (duplicated). Collective: every
// rank must call it. FailedPrecondition before mpi_init(); InvalidArgument for bad
// options; DeadlineExceeded if some rank does not join within the timeout.
StatusOr<std::unique_ptr<Communicator>> make_mpi_communicator(const MpiOptions& options);

}  // namespace moe
