// The MPI process: init and finalize (MPI_THREAD_FUNNELED, errors returned, not fatal),
// abort, launch detection (mpi_communicator.h), and the MPI error -> Status mapping that
// the communicator shares (mpi_process.h).
#include "moe/comm/mpi_process.h"

// (OMPI_SKIP_MPICXX: set for every user of the moe target, src/CMakeLists.txt.)
#include <mpi.h>

#include <cstdio>
#include <cstdlib>

#include "moe/comm/mpi_communicator.h"
#include "moe/core/exit_deadline.h"

namespace moe {
namespace mpi_detail {

Status mpi_status(const std::string& op, int rc) {
  char text[MPI_MAX_ERROR_STRING + 1] = {0};
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) std::snprintf(text, sizeof(text), "MPI error %d", rc);
  int cls = rc;
  if (MPI_Error_class(rc, &cls) != MPI_SUCCESS) cls = rc;
  const std::string msg = "mpi " + op + ": " + text + " (error class " + std::to_string(cls) + ")";
  switch (cls) {
    case MPI_ERR_BUFFER:
    case MPI_ERR_COUNT:
    case MPI_ERR_TYPE:
    case MPI_ERR_TAG:
    case MPI_ERR_RANK:
    case MPI_ERR_ROOT:
    case MPI_ERR_ARG:
    case MPI_ERR_TRUNCATE:
    case MPI_ERR_OP:
      return invalid_argument(msg);
    case MPI_ERR_INTERN:
    case MPI_ERR_NO_MEM:
      return internal_error(msg);
    default:
      return Status(StatusCode::kUnavailable, msg);
  }
}

bool mpi_initialized() {
  int flag = 0;
  MPI_Initialized(&flag);
  return flag != 0;
}
bool mpi_finalized() {
  int flag = 0;
  MPI_Finalized(&flag);
  return flag != 0;
}

}  // namespace mpi_detail

using mpi_detail::mpi_finalized;
using mpi_detail::mpi_initialized;
using mpi_detail::mpi_status;

Status mpi_init(int* argc, char*** argv) {
  if (mpi_finalized()) return failed_precondition("mpi_init: MPI was already finalized");
  if (mpi_initialized()) return ok_status();
  int provided = MPI_THREAD_SINGLE;
  int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  if (rc != MPI_SUCCESS) return mpi_status("MPI_Init_thread", rc);
  rc = MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if (rc != MPI_SUCCESS) return mpi_status("MPI_Comm_set_errhandler(MPI_COMM_WORLD)", rc);
  if (provided < MPI_THREAD_FUNNELED) {
    return failed_precondition("mpi_init: the MPI library provides thread level " + std::to_string(provided) +
                               ", below MPI_THREAD_FUNNELED");
  }
  return ok_status();
}

Status mpi_finalize() {
  if (!mpi_initialized() || mpi_finalized()) return ok_status();
  const int rc = MPI_Finalize();
  if (rc != MPI_SUCCESS) return mpi_status("MPI_Finalize", rc);
  return ok_status();
}

bool launched_under_mpi() {
  const char* vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
  for (const char* v : vars) {
    const char* s = std::getenv(v);
    if (s && *s) return true;
  }
  return false;
}

void mpi_abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (mpi_initialized() && !mpi_finalized()) {
    ExitDeadline guard("MPI_Abort", 10, code);  // never returns normally: MPI_Abort ends the process
    MPI_Abort(MPI_COMM_WORLD, code);
  }
  std::_Exit(code);
}

}  // namespace moe
