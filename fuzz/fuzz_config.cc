// libFuzzer target: config.json through load_model_config (every family's fields,
// rope_scaling, quantization_config, sizes and their consistency checks), then through
// load_model_config_checked against the tensor names and shapes of the shipped tiny
// Mixtral (config_fit.h: sizes the weights cannot back, e.g. num_hidden_layers 1e9,
// refused before anything is sized by them).
#include <cstdint>
#include <string>
#include <vector>

#include "memory_source.h"
#include "moe/model/config.h"
#include "moe/model/config_fit.h"
#include "moe/model/hf_checkpoint.h"

namespace {

// The tiny model's tensors (names and shapes), read once; empty if it cannot be opened.
const std::vector<moe::TensorInfo>& tiny_tensors() {
  static const std::vector<moe::TensorInfo> tensors = [] {
    auto ckpt = moe::HfCheckpoint::open(std::string(MOE_SOURCE_DIR) + "/models/tiny-mixtral-shakespeare");
    return ckpt.ok() ? ckpt->tensor_infos() : std::vector<moe::TensorInfo>{};
  }();
  return tensors;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  moe::fuzz::MemorySource source;
  source.files["config.json"] = std::string(reinterpret_cast<const char*>(data), size);
  auto config = moe::load_model_config(source);
  (void)config;
  source.tensors = tiny_tensors();
  auto checked = moe::load_model_config_checked(source);
  (void)checked;
  return 0;
}
