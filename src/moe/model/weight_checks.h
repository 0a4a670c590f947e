// Start-up checks of a model's weight bytes (hardening against silent wrong answers):
//   - every expert's content digest, compared across the ranks of an expert-parallel
//     group so that swapped or different experts on one rank are refused by name
//     (runtime/ep_session.h agree_on_experts);
//   - finiteness: a NaN or Inf weight is refused at load, naming the tensor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moe/model/config.h"
#include "moe/model/model_source.h"
#include "moe/status.h"

namespace moe {

// An expert's digest (ExpertDigest, model_source.h) is XXH3-128 of its raw bytes: the
// tensors named "<layer_prefix><l>.<expert_prefix><e>.*" (weight_names.h), sorted by
// name, concatenated. That is the hash the checkpoint store's manifest records for expert
// shard (l, e) (store/store_save_plan.cc), so a store and the HF directory it was saved
// from agree.

// Every expert's digest, index layer * num_experts + expert (all zero for layers without
// experts). Answered from source.recorded_expert_digest() where it has one (a store:
// no bytes read), else hashed from the bytes (every expert, on this rank held or not;
// on `threads` threads, >= 1). Errors from source.get() (an expert the source cannot read).
StatusOr<std::vector<ExpertDigest>> expert_digests(const ModelSource& source, const ModelConfig& config, int threads);

// Checks that every floating-point tensor this process loaded (source.get() succeeds;
// F32, BF16, F16, F8_E4M3) holds no NaN and no Inf (F8_E4M3 has no Inf). DataLoss naming
// the first bad tensor (by name), source.location(), the element index and its value
// kind. `threads` >= 1.
Status check_weights_finite(const ModelSource& source, int threads);

}  // namespace moe
