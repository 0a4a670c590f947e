// Which shard a tensor of a Hugging Face checkpoint goes to:
//   "<layer_prefix><l>.<expert_prefix><e>.*" (weight_names.h) -> expert shard (l, e): its
//       w1/w2/w3 (gate/up/down) and any per-expert scales;
//   other "<layer_prefix><l>.*"  -> the layer's non-expert shard (attention, norms,
//       router, shared expert);
//   everything else (embeddings, final norm, lm_head) -> the "model" shard.
#pragma once

#include <string>
#include <vector>

#include "moe/model/config.h"
#include "moe/model/model_source.h"
#include "moe/store/content_hash.h"
#include "moe/store/manifest.h"

namespace moe {

struct ShardKey {
  ShardKind kind = ShardKind::kModel;
  int layer = -1;
  int expert = -1;
  // "layer.3.expert.5", "layer.3", "model".
  std::string id() const;
};

ShardKey shard_key_for(const std::string& tensor_name, ModelFamily family);

// Identifies the model's structure, not its values: XXH3-128 of model_type and every
// tensor's name, dtype and shape (sorted by name). A fine-tune keeps it; another model
// (or another size) changes it.
Hash128 model_structure_fingerprint(const std::string& model_type, const std::vector<TensorInfo>& tensors);

}  // namespace moe
