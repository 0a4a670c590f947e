// Copies the matrices a process decodes with into memory it owns (a HugePageArena:
// transparent huge pages), and points the weights at the copies: decode streams every
// active weight once per token, and reads 2 MiB pages ~1.5x faster than the 4 KiB pages
// of a mapped safetensors file (core/huge_page_arena.h, docs/performance.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "moe/core/huge_page_arena.h"
#include "moe/model/weights.h"

namespace moe {

// Every Weight2D of *weights with data (embedding, lm_head, attention and MLA
// projections, router, dense MLP, shared expert and its gate, the routed experts with
// loaded == true) is copied into *arena, its FP8 or int8 block scales along, and
// repointed there; a matrix bound twice (tied embeddings) is copied once. Values, shapes
// and dtypes are unchanged, so every result computed from *weights is bit-identical.
// Experts not loaded are left alone. The old storage (mapped files, buffers) is no longer
// referenced by *weights afterwards; callers may free buffers they own. Returns the
// bytes copied.
size_t copy_weights_to_arena(ModelWeights* weights, HugePageArena* arena);

// A NaN or Inf that copy_weights_to_arena found: element `index` of the matrix (or block
// scales) whose first byte was `data` before the copy (a tensor of the source, for a
// matrix bound straight from it).
struct NonFiniteWeight {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t index = -1;
};
struct ArenaCopyOptions {
  int threads = 1;            // copying in chunks of 4 MiB, >= 1
  bool check_finite = false;  // check for NaN/Inf as it copies (finite_scan.h: copy_finding_non_finite)
};
struct ArenaCopyResult {
  size_t bytes = 0;                           // copied
  std::optional<NonFiniteWeight> non_finite;  // with check_finite: the first one, by matrix order
};
// The same copy on options.threads threads; with check_finite, the bytes are scanned as
// they are copied (read once from memory). Everything is copied and repointed even when a
// non-finite element is found (the caller refuses the weights).
ArenaCopyResult copy_weights_to_arena(ModelWeights* weights, HugePageArena* arena, const ArenaCopyOptions& options);

// The bytes copy_weights_to_arena would copy (nothing is changed).
size_t weights_bytes_to_copy(const ModelWeights& weights);

// The first bytes of the storage it would copy from: each matrix's data and block scales.
std::vector<const void*> weights_copy_sources(const ModelWeights& weights);

}  // namespace moe
