// MPI process-level helpers inside src/moe/comm/: MPI error codes as Status values and
// whether MPI is initialised / finalised. Internal to comm (mpi_communicator.cc and
// mpi_process.cc); everyone else uses mpi_communicator.h.
#pragma once

#include <string>

#include "moe/status.h"

namespace moe::mpi_detail {

// An MPI error code as a Status: "mpi <op>: <MPI_Error_string> (error class N)".
// Argument errors are InvalidArgument; internal ones Internal; the rest (transport,
// dead processes) Unavailable.
Status mpi_status(const std::string& op, int rc);
bool mpi_initialized();
bool mpi_finalized();

}  // namespace moe::mpi_detail
