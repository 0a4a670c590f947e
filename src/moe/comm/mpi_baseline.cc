// Raw-MPI baselines for `moe bench a2a` (mpi_baseline.h).
#include "moe/comm/mpi_baseline.h"

#include <mpi.h>

#include <climits>
#include <string>

namespace moe {
namespace {

// "mpi <op>: <MPI_Error_string>" as an Internal error, or OK.
Status check(int rc, const char* op) {
  if (rc == MPI_SUCCESS) return ok_status();
  char text[MPI_MAX_ERROR_STRING + 1] = {0};
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) {
    return internal_error(std::string("mpi ") + op + ": error " + std::to_string(rc));
  }
  return internal_error(std::string("mpi ") + op + ": " + text);
}

}  // namespace

int mpi_world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int mpi_world_size() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

Status mpi_world_max(std::vector<double>* values) {
  if (values->empty()) return ok_status();
  return check(MPI_Allreduce(MPI_IN_PLACE, values->data(), static_cast<int>(values->size()), MPI_DOUBLE, MPI_MAX,
                             MPI_COMM_WORLD),
               "MPI_Allreduce(max)");
}

Status mpi_world_max(double* value) {
  return check(MPI_Allreduce(MPI_IN_PLACE, value, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce(max)");
}

Status mpi_world_sum(std::vector<int64_t>* values) {
  if (values->empty()) return ok_status();
  return check(MPI_Allreduce(MPI_IN_PLACE, values->data(), static_cast<int>(values->size()), MPI_INT64_T, MPI_SUM,
                             MPI_COMM_WORLD),
               "MPI_Allreduce(sum)");
}

Status mpi_world_sum(int64_t* value) {
  return check(MPI_Allreduce(MPI_IN_PLACE, value, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce(sum)");
}

Status mpi_world_broadcast(int* value) { return check(MPI_Bcast(value, 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Bcast"); }

Status mpi_world_barrier() { return check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

struct MpiRowExchange::Types {
  MPI_Datatype dispatch = MPI_DATATYPE_NULL, combine = MPI_DATATYPE_NULL;
  ~Types() {
    if (dispatch != MPI_DATATYPE_NULL) MPI_Type_free(&dispatch);
    if (combine != MPI_DATATYPE_NULL) MPI_Type_free(&combine);
  }
};

StatusOr<std::unique_ptr<MpiRowExchange>> MpiRowExchange::create(const std::vector<int>& send_counts,
                                                                  int64_t dispatch_row_bytes,
                                                                  int64_t combine_row_bytes) {
  const int num_ranks = mpi_world_size();
  if (static_cast<int>(send_counts.size()) != num_ranks) {
    return invalid_argument("MpiRowExchange: send_counts has " + std::to_string(send_counts.size()) +
                            " entries for " + std::to_string(num_ranks) + " ranks");
  }
  for (int64_t row : {dispatch_row_bytes, combine_row_bytes}) {
    if (row < 1 || row > INT_MAX) {
      return invalid_argument("MpiRowExchange: row size " + std::to_string(row) + " bytes is outside [1, INT_MAX]");
    }
  }
  std::unique_ptr<MpiRowExchange> x(new MpiRowExchange());
  const size_t n = static_cast<size_t>(num_ranks);
  x->send_counts_ = send_counts;
  x->recv_counts_.assign(n, 0);
  x->probe_counts_.assign(n, 0);
  x->send_displs_.assign(n + 1, 0);
  x->recv_displs_.assign(n + 1, 0);
  for (size_t r = 0; r < n; ++r) {
    if (send_counts[r] < 0) return invalid_argument("MpiRowExchange: send_counts[" + std::to_string(r) + "] < 0");
    if (x->send_displs_[r] > INT_MAX - send_counts[r]) {
      return invalid_argument("MpiRowExchange: send rows overflow int");
    }
    x->send_displs_[r + 1] = x->send_displs_[r] + send_counts[r];
  }
  MOE_RETURN_IF_ERROR(check(MPI_Alltoall(x->send_counts_.data(), 1, MPI_INT, x->recv_counts_.data(), 1, MPI_INT,
                                         MPI_COMM_WORLD),
                            "MPI_Alltoall(counts)"));
  for (size_t r = 0; r < n; ++r) {
    if (x->recv_displs_[r] > INT_MAX - x->recv_counts_[r]) {
      return invalid_argument("MpiRowExchange: received rows overflow int");
    }
    x->recv_displs_[r + 1] = x->recv_displs_[r] + x->recv_counts_[r];
  }
  x->types_ = std::make_unique<Types>();
  Types& t = *x->types_;
  MOE_RETURN_IF_ERROR(
      check(MPI_Type_contiguous(static_cast<int>(dispatch_row_bytes), MPI_BYTE, &t.dispatch), "MPI_Type_contiguous"));
  MOE_RETURN_IF_ERROR(check(MPI_Type_commit(&t.dispatch), "MPI_Type_commit"));
  MOE_RETURN_IF_ERROR(
      check(MPI_Type_contiguous(static_cast<int>(combine_row_bytes), MPI_BYTE, &t.combine), "MPI_Type_contiguous"));
  MOE_RETURN_IF_ERROR(check(MPI_Type_commit(&t.combine), "MPI_Type_commit"));
  return x;
}

MpiRowExchange::~MpiRowExchange() = default;

Status MpiRowExchange::exchange(const void* dispatch_send, void* dispatch_recv, const void* combine_send,
                                void* combine_recv) {
  MOE_RETURN_IF_ERROR(check(MPI_Alltoall(send_counts_.data(), 1, MPI_INT, probe_counts_.data(), 1, MPI_INT,
                                         MPI_COMM_WORLD),
                            "MPI_Alltoall(counts)"));
  MOE_RETURN_IF_ERROR(check(MPI_Alltoallv(dispatch_send, send_counts_.data(), send_displs_.data(), types_->dispatch,
                                          dispatch_recv, probe_counts_.data(), recv_displs_.data(), types_->dispatch,
                                          MPI_COMM_WORLD),
                            "MPI_Alltoallv(dispatch)"));
  return check(MPI_Alltoallv(combine_send, probe_counts_.data(), recv_displs_.data(), types_->combine, combine_recv,
                             send_counts_.data(), send_displs_.data(), types_->combine, MPI_COMM_WORLD),
               "MPI_Alltoallv(combine)");
}

}  // namespace moe
