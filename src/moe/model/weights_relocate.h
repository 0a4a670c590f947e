// Copies the matrices a process decodes with into memory it owns (a HugePageArena:
// transparent huge pages), and points the weights at the copies: decode streams every
// active weight once per token, and reads 2 MiB pages ~1.5x faster than the 4 KiB pages
// of a mapped safetensors file (core/huge_page_arena.h, docs/performance.md).
#pragma once

#include <cstddef>

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

// The bytes copy_weights_to_arena would copy (nothing is changed).
size_t weights_bytes_to_copy(const ModelWeights& weights);

}  // namespace moe
