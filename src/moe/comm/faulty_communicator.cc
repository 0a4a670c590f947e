#include "moe/comm/faulty_communicator.h"

#include <chrono>
#include <numeric>
#include <thread>

namespace moe {
namespace {

// Completes the wrapped request, then corrupts its result (once) if asked to.
class CorruptingRequest final : public CommRequest {
 public:
  CorruptingRequest(std::unique_ptr<CommRequest> inner, void* recv, size_t bytes, bool corrupt,
                    int64_t* corrupted)
      : inner_(std::move(inner)), recv_(recv), bytes_(bytes), corrupt_(corrupt), corrupted_(corrupted) {}
  Status wait() override {
    Status st = inner_->wait();
    finish(st.ok());
    return st;
  }
  StatusOr<bool> test() override {
    auto done = inner_->test();
    if (done.ok() && done.value()) finish(true);
    return done;
  }

 private:
  void finish(bool ok) {
    if (!ok || !corrupt_ || bytes_ == 0) return;
    static_cast<uint8_t*>(recv_)[bytes_ / 2] ^= 0x5a;
    ++*corrupted_;
    corrupt_ = false;
  }
  std::unique_ptr<CommRequest> inner_;
  void* recv_;
  size_t bytes_;
  bool corrupt_;
  int64_t* corrupted_;
};

size_t total(const std::vector<size_t>& v) { return std::accumulate(v.begin(), v.end(), size_t{0}); }

}  // namespace

FaultyCommunicator::FaultyCommunicator(Communicator& inner, const FaultPlan& plan) : inner_(inner), plan_(plan) {}

Status FaultyCommunicator::enter(const char* op) {
  const int64_t index = counts_.ops++;
  if (plan_.vanish_after_ops >= 0 && index >= plan_.vanish_after_ops) {
    ++counts_.refused;
    return Status(StatusCode::kUnavailable, std::string(op) + ": rank " + std::to_string(inner_.rank()) +
                                                " is gone (fault injected after " +
                                                std::to_string(plan_.vanish_after_ops) + " operations)");
  }
  if (plan_.delay_seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(plan_.delay_seconds));
  return ok_status();
}

Status FaultyCommunicator::reform(double join_seconds) {
  MOE_RETURN_IF_ERROR(enter("reform"));
  return inner_.reform(join_seconds);
}

void FaultyCommunicator::corrupt(void* data, size_t bytes) {
  if (bytes == 0) return;
  static_cast<uint8_t*>(data)[bytes / 2] ^= 0x5a;
  ++counts_.corrupted;
}

bool FaultyCommunicator::take_alltoallv_corruption() {
  return plan_.corrupt_alltoallv_index >= 0 && alltoallv_calls_++ == plan_.corrupt_alltoallv_index;
}

Status FaultyCommunicator::alltoallv(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                                     const std::vector<size_t>& recv_bytes) {
  MOE_RETURN_IF_ERROR(enter("alltoallv"));
  const bool corrupt_this = take_alltoallv_corruption();
  MOE_RETURN_IF_ERROR(inner_.alltoallv(send, send_bytes, recv, recv_bytes));
  if (corrupt_this) corrupt(recv, total(recv_bytes));
  return ok_status();
}

StatusOr<std::unique_ptr<CommRequest>> FaultyCommunicator::ialltoallv(const void* send,
                                                                      const std::vector<size_t>& send_bytes,
                                                                      void* recv,
                                                                      const std::vector<size_t>& recv_bytes) {
  MOE_RETURN_IF_ERROR(enter("ialltoallv"));
  const bool corrupt_this = take_alltoallv_corruption();
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<CommRequest> inner, inner_.ialltoallv(send, send_bytes, recv, recv_bytes));
  if (!corrupt_this) return inner;
  return std::unique_ptr<CommRequest>(
      new CorruptingRequest(std::move(inner), recv, total(recv_bytes), true, &counts_.corrupted));
}

Status FaultyCommunicator::alltoall_int64(const int64_t* send, int64_t* recv) {
  MOE_RETURN_IF_ERROR(enter("alltoall_int64"));
  return inner_.alltoall_int64(send, recv);
}

Status FaultyCommunicator::allreduce_sum(float* data, size_t n) {
  MOE_RETURN_IF_ERROR(enter("allreduce_sum"));
  return inner_.allreduce_sum(data, n);
}

Status FaultyCommunicator::allreduce_sum(int64_t* data, size_t n) {
  MOE_RETURN_IF_ERROR(enter("allreduce_sum"));
  return inner_.allreduce_sum(data, n);
}

Status FaultyCommunicator::allgather(const void* send, size_t bytes, void* recv) {
  MOE_RETURN_IF_ERROR(enter("allgather"));
  return inner_.allgather(send, bytes, recv);
}

Status FaultyCommunicator::broadcast(void* data, size_t bytes, int root) {
  MOE_RETURN_IF_ERROR(enter("broadcast"));
  return inner_.broadcast(data, bytes, root);
}

Status FaultyCommunicator::barrier() {
  MOE_RETURN_IF_ERROR(enter("barrier"));
  return inner_.barrier();
}

void FaultyCommunicator::vanish_if_tag(int tag) {
  if (plan_.vanish_on_tag >= 0 && tag == plan_.vanish_on_tag && plan_.vanish_after_ops < 0) {
    plan_.vanish_after_ops = static_cast<int>(counts_.ops);  // from this operation on
  }
}

Status FaultyCommunicator::send(const void* data, size_t bytes, int dest, int tag) {
  vanish_if_tag(tag);
  MOE_RETURN_IF_ERROR(enter("send"));
  return inner_.send(data, bytes, dest, tag);
}

Status FaultyCommunicator::recv(void* data, size_t bytes, int source, int tag) {
  vanish_if_tag(tag);
  MOE_RETURN_IF_ERROR(enter("recv"));
  MOE_RETURN_IF_ERROR(inner_.recv(data, bytes, source, tag));
  if (plan_.corrupt_recv_tag >= 0 && tag == plan_.corrupt_recv_tag && !recv_corrupted_) {
    recv_corrupted_ = true;
    corrupt(data, bytes);
  }
  return ok_status();
}

}  // namespace moe
