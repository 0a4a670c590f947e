// A model loaded whole from a Hugging Face directory for decoder tests: config, the
// mapped checkpoint and the weights bound into it (the weights point into `ckpt`, so
// the struct stays on the heap and never moves). Aborts the test binary on a load error.
#pragma once

#include <memory>
#include <string>

#include "moe/model/config.h"
#include "moe/model/hf_checkpoint.h"
#include "moe/model/weights.h"

namespace moe::testing {

struct LoadedModel {
  ModelConfig config;
  HfCheckpoint ckpt;
  ModelWeights weights;
};

inline std::unique_ptr<LoadedModel> load_model(const std::string& dir) {
  auto m = std::make_unique<LoadedModel>();
  m->config = load_model_config(dir).value();
  m->ckpt = HfCheckpoint::open(dir).value();
  m->weights = bind_weights(m->config, m->ckpt).value();
  return m;
}

}  // namespace moe::testing
