#include "moe/ops/kernel_mode.h"

#include <atomic>

namespace moe {
namespace {
std::atomic<bool> g_batch_invariant{false};
}  // namespace

void set_batch_invariant_kernels(bool on) { g_batch_invariant.store(on, std::memory_order_relaxed); }
bool batch_invariant_kernels() { return g_batch_invariant.load(std::memory_order_relaxed); }

}  // namespace moe
