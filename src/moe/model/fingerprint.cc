#include "moe/model/fingerprint.h"

#include <xxhash.h>

#include "moe/core/mapped_file.h"

namespace moe {

uint64_t model_fingerprint(const std::string& model_dir, const ModelWeights& weights, const HfCheckpoint& checkpoint) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  auto config_text = read_text_file(model_dir + "/config.json");
  if (config_text.ok()) XXH3_64bits_update(state, config_text.value().data(), config_text.value().size());
  for (const auto& shard : checkpoint.shards()) {
    for (const auto& [name, view] : shard->tensors()) {
      XXH3_64bits_update(state, name.data(), name.size());
      XXH3_64bits_update(state, view.dtype_name.data(), view.dtype_name.size());
      XXH3_64bits_update(state, view.shape.data(), view.shape.size() * sizeof(int64_t));
    }
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
