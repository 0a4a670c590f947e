// A fingerprint of the model a rank loaded, compared across ranks at start-up so that
// ranks started with different model files or configs fail fast with a clear error.
#pragma once

#include <cstdint>
#include <string>

#include "moe/model/hf_checkpoint.h"
#include "moe/model/weights.h"

namespace moe {

// XXH3-64 over: config.json's bytes, the tensor table (names, dtypes, shapes) of every
// shard, and the bytes of the replicated small tensors every rank holds (norm weights,
// routers). Expert weights are not read (each rank holds different ones).
uint64_t model_fingerprint(const std::string& model_dir, const ModelWeights& weights, const HfCheckpoint& checkpoint);

}  // namespace moe
