// A fingerprint of the model a rank loaded, compared across ranks at start-up so that
// ranks started with different model files or configs fail fast with a clear error.
#pragma once

#include <cstdint>
#include <string>

#include "moe/model/model_source.h"
#include "moe/model/weights.h"

namespace moe {

// XXH3-64 over: config.json's bytes (read through `source`), the tensor table (names,
// dtypes, shapes, sorted by name: source.tensor_infos(), so an HF directory and a store
// of the same model agree), and the bytes of the replicated small tensors every rank
// holds (norm weights, routers). Expert weights are not read (each rank holds
// different ones).
uint64_t model_fingerprint(const ModelSource& source, const ModelWeights& weights);

}  // namespace moe
