#include "moe/engine/engine_hugepages.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "moe/core/huge_page_arena.h"
#include "moe/core/logging.h"
#include "moe/model/hf_checkpoint.h"
#include "moe/model/weights_relocate.h"

namespace moe {
namespace {

// `auto` leaves smaller models in the mapped files: their weights stay in the CPU caches
// between tokens, and the copy would only cost start-up time.
constexpr size_t kAutoHugePagesMinBytes = size_t{64} << 20;

}  // namespace

// EngineOptions::hugepages: the decoder's matrices copied into a HugePageArena
// (model/weights_relocate.h) after any FP8 dequantisation, int8 quantisation or TP
// sharding, so that the copies are of what decode reads; the buffers those made are then
// freed (the weights no longer point into them).
Status place_weights_in_huge_pages(Engine::Impl* impl, const std::string& mode) {
  const bool thp = transparent_hugepages_available();
  ModelWeights* w = impl->tensor_parallel() ? &impl->tp_weights : &impl->weights;
  const size_t to_copy = weights_bytes_to_copy(*w);
  const char* why_not = !thp                          ? "no transparent huge pages"
                        : impl->store != nullptr      ? "an expert store"
                        : to_copy < kAutoHugePagesMinBytes ? "under 64 MiB of weights: they stay in the caches"
                                                       : nullptr;
  if (mode == "off" || (mode == "auto" && why_not != nullptr)) {
    MOE_LOG_DEBUG("weights: left in the mapped files (--hugepages {}{}{})", mode, why_not ? ": " : "",
                  why_not ? why_not : "");
    return ok_status();
  }
  const auto t0 = std::chrono::steady_clock::now();
  const size_t before = anon_huge_page_bytes();
  impl->weight_arena = std::make_unique<HugePageArena>();
  const size_t bytes = copy_weights_to_arena(w, impl->weight_arena.get());
  impl->fp8_dequantized.clear();
  impl->int8_quantized.clear();
  if (!impl->tensor_parallel()) impl->expert_store.clear();  // under TP, `weights` may still point into it
  // The mapped files' pages that the copy read leave the resident set (they stay in the
  // page cache): RSS then counts the weights once.
  if (const auto* hf = dynamic_cast<const HfCheckpoint*>(impl->source.get())) {
    for (const auto& shard : hf->shards()) shard->drop_resident_pages();
  }
  const size_t huge = anon_huge_page_bytes() - std::min(before, anon_huge_page_bytes());
  MOE_LOG_INFO("weights: {:.1f} MB copied into huge pages ({:.1f} MB of them in 2 MiB pages{}) in {:.3f} s",
               bytes / 1e6, huge / 1e6, thp ? "" : "; the kernel offers none",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return ok_status();
}


}  // namespace moe
