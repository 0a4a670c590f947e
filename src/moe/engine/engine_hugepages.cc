#include "moe/engine/engine_hugepages.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "moe/core/huge_page_arena.h"
#include "moe/core/logging.h"
#include "moe/model/hf_checkpoint.h"
#include "moe/model/weight_checks.h"
#include "moe/model/weights_relocate.h"

namespace moe {
namespace {

// `auto` leaves smaller models in the mapped files: their weights stay in the CPU caches
// between tokens, and the copy would only cost start-up time.
constexpr size_t kAutoHugePagesMinBytes = size_t{64} << 20;

// Why `auto` leaves the weights in place (nullptr: it copies).
const char* why_not_copied(const Engine::Impl& impl, bool thp) {
  const ModelWeights& w = impl.tensor_parallel() ? impl.tp_weights : impl.weights;
  return !thp                                                  ? "no transparent huge pages"
         : impl.store != nullptr                               ? "an expert store"
         : weights_bytes_to_copy(w) < kAutoHugePagesMinBytes    ? "under 64 MiB of weights: they stay in the caches"
                                                               : nullptr;
}

// The DataLoss of a non-finite element at `bad`, naming the source tensor that holds it.
Status non_finite_error(const ModelSource& source, const NonFiniteWeight& bad) {
  for (const TensorInfo& info : source.tensor_infos()) {
    auto t = source.get(info.name);
    if (t.ok() && t.value()->data == bad.data) return non_finite_weight_error(source, *t.value(), bad.index);
  }
  return Status(StatusCode::kDataLoss, "a weight matrix of " + source.location() + " holds a NaN or Inf at element " +
                                           std::to_string(bad.index) + " (" + dtype_name(bad.dtype) +
                                           "): the checkpoint is corrupt (skip this check with --skip-weight-check)");
}

}  // namespace

bool will_place_weights_in_huge_pages(const Engine::Impl& impl, const std::string& mode) {
  if (mode == "off") return false;
  return mode != "auto" || why_not_copied(impl, transparent_hugepages_available()) == nullptr;
}

bool copies_source_matrices(const Engine::Impl& impl, const EngineOptions& options) {
  return will_place_weights_in_huge_pages(impl, options.hugepages) && !impl.tensor_parallel() &&
         !(options.fp8_mode == Fp8Mode::kDequant && impl.config.fp8.enabled) && !impl.kernel_choice.int8_weights;
}

// EngineOptions::hugepages: the decoder's matrices copied into a HugePageArena
// (model/weights_relocate.h) after any FP8 dequantisation, int8 quantisation or TP
// sharding, so that the copies are of what decode reads; the buffers those made are then
// freed (the weights no longer point into them).
Status place_weights_in_huge_pages(Engine::Impl* impl, const HugePageCopy& copy) {
  const bool thp = transparent_hugepages_available();
  const char* why_not = why_not_copied(*impl, thp);
  if (!will_place_weights_in_huge_pages(*impl, copy.mode)) {
    MOE_LOG_DEBUG("weights: left in the mapped files (--hugepages {}{}{})", copy.mode, why_not ? ": " : "",
                  why_not ? why_not : "");
    return ok_status();
  }
  ModelWeights* w = impl->tensor_parallel() ? &impl->tp_weights : &impl->weights;
  const auto t0 = std::chrono::steady_clock::now();
  const size_t before = anon_huge_page_bytes();
  impl->weight_arena = std::make_unique<HugePageArena>();
  const ArenaCopyResult copied = copy_weights_to_arena(
      w, impl->weight_arena.get(), ArenaCopyOptions{.threads = copy.threads, .check_finite = copy.check_finite});
  // Named from the source's tensors, which are still mapped.
  if (copied.non_finite) return non_finite_error(*impl->source, *copied.non_finite);
  impl->fp8_dequantized.clear();
  impl->int8_quantized.clear();
  if (!impl->tensor_parallel()) impl->expert_store.clear();  // under TP, `weights` may still point into it
  // The mapped files' pages that the copy read leave the resident set (they stay in the
  // page cache): RSS then counts the weights once.
  if (const auto* hf = dynamic_cast<const HfCheckpoint*>(impl->source.get())) {
    for (const auto& shard : hf->shards()) shard->drop_resident_pages();
  }
  const size_t huge = anon_huge_page_bytes() - std::min(before, anon_huge_page_bytes());
  MOE_LOG_INFO("weights: {:.1f} MB copied into huge pages ({:.1f} MB of them in 2 MiB pages{}){} in {:.3f} s on {} "
               "thread(s)",
               copied.bytes / 1e6, huge / 1e6, thp ? "" : "; the kernel offers none",
               copy.check_finite ? " and checked for NaN/Inf" : "",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), copy.threads);
  return ok_status();
}

}  // namespace moe
