// libFuzzer target: config.json through load_model_config (every family's fields,
// rope_scaling, quantization_config, sizes and their consistency checks).
#include <cstdint>
#include <string>

#include "memory_source.h"
#include "moe/model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  moe::fuzz::MemorySource source;
  source.files["config.json"] = std::string(reinterpret_cast<const char*>(data), size);
  auto config = moe::load_model_config(source);
  (void)config;
  return 0;
}
