#include "moe/comm/communicator.h"

#include <algorithm>

namespace moe {

Status Communicator::reduce_scatter_sum(const float* send, float* recv, size_t count) {
  const size_t n = static_cast<size_t>(size());
  const size_t block = count * sizeof(float);
  std::vector<size_t> bytes(n, block);
  std::vector<float> gathered(n * count);  // block r: rank r's contribution to my block
  MOE_RETURN_IF_ERROR(alltoallv(send, bytes, gathered.data(), bytes));
  std::fill(recv, recv + count, 0.0f);
  for (size_t r = 0; r < n; ++r) {  // rank order: every rank sums in the same order
    const float* b = gathered.data() + r * count;
    for (size_t i = 0; i < count; ++i) recv[i] += b[i];
  }
  return ok_status();
}

}  // namespace moe
