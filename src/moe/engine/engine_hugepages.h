// EngineOptions::hugepages applied at Engine::open (internal to engine/): the decoder's
// matrices copied into transparent huge pages (model/weights_relocate.h).
#pragma once

#include <string>

#include "moe/engine/engine_impl.h"
#include "moe/status.h"

namespace moe {

// How place_weights_in_huge_pages copies the weights.
struct HugePageCopy {
  std::string mode = "auto";  // EngineOptions::hugepages: "on", "off" or "auto"
  int threads = 1;            // >= 1
  // Scan the matrices for NaN/Inf as they are copied (the caller left them out of
  // check_weights_finite: copies_source_matrices). DataLoss as non_finite_weight_error.
  bool check_finite = false;
};

// Whether place_weights_in_huge_pages will copy the decoder's matrices for `mode` (the
// state after loading: THP offered, an HF directory or a store, the bytes to copy).
bool will_place_weights_in_huge_pages(const Engine::Impl& impl, const std::string& mode);

// Whether the copy will read the matrices' bytes straight from the source, as loaded:
// it will copy, and no TP shard, FP8 dequantisation or int8 quantisation comes between
// (they make buffers of their own). Then the copy can check them instead of a separate
// pass (EngineOptions::check_weights_finite).
bool copies_source_matrices(const Engine::Impl& impl, const EngineOptions& options);

// Run after any FP8 dequantisation, int8 quantisation or TP sharding (so the copies are
// of what decode reads) and before the Decoder is made. `mode` "auto" (checked by
// choose_kernels) copies when the kernel offers THP, the weights come from a Hugging Face
// directory and are at least 64 MiB. The copy runs on copy.threads threads. After it the
// buffers those steps made are freed and the mapped files' pages leave the resident set.
// Logs what it did and how long it took. Errors: with copy.check_finite, DataLoss naming
// the first tensor holding a NaN or Inf (non_finite_weight_error); an mmap failure aborts,
// as an allocation would.
Status place_weights_in_huge_pages(Engine::Impl* impl, const HugePageCopy& copy);

}  // namespace moe
