// Start-up checks of a model's weight bytes (hardening against silent wrong answers):
//   - every expert's content digest, compared across the ranks of an expert-parallel
//     group so that swapped or different experts on one rank are refused by name
//     (runtime/ep_session.h agree_on_experts);
//   - finiteness: a NaN or Inf weight is refused at load, naming the tensor.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_set>
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
// F32, BF16, F16, F8_E4M3) holds no NaN and no Inf (F8_E4M3 has no Inf), but those whose
// first byte is in `skip` (tensors a caller checks itself: the huge-page copy of
// weights_relocate.h checks what it copies). finite_scan.h's kernel over chunks of at
// most 8 MiB on `threads` (>= 1) threads. DataLoss as non_finite_weight_error for the first
// bad tensor (by name) and its first bad element.
Status check_weights_finite(const ModelSource& source, int threads, const std::unordered_set<const void*>& skip = {});

// DataLoss naming tensor `t`, source.location(), element `index` (a NaN or Inf: which one,
// from its bits), the dtype and shape, and --skip-weight-check.
Status non_finite_weight_error(const ModelSource& source, const StoredTensor& t, int64_t index);

}  // namespace moe
