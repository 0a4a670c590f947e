#include "moe/model/fingerprint.h"

#include <xxhash.h>

namespace moe {

uint64_t model_fingerprint(const ModelSource& source, const ModelWeights& weights) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  auto config_text = source.read_file("config.json");
  if (config_text.ok()) XXH3_64bits_update(state, config_text.value().data(), config_text.value().size());
  for (const TensorInfo& t : source.tensor_infos()) {
    XXH3_64bits_update(state, t.name.data(), t.name.size());
    XXH3_64bits_update(state, t.dtype_name.data(), t.dtype_name.size());
    XXH3_64bits_update(state, t.shape.data(), t.shape.size() * sizeof(int64_t));
  }
  for (const auto& layer : weights.layers) {
    XXH3_64bits_update(state, layer.input_norm.data(), layer.input_norm.size() * sizeof(float));
    XXH3_64bits_update(state, layer.post_attention_norm.data(), layer.post_attention_norm.size() * sizeof(float));
    XXH3_64bits_update(state, layer.router.data, layer.router.bytes());
  }
  XXH3_64bits_update(state, weights.final_norm.data(), weights.final_norm.size() * sizeof(float));
  const uint64_t h = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return h;
}

}  // namespace moe
