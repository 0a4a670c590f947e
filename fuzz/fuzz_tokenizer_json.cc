// libFuzzer target: the tokenizer.json loader (HfTokenizer::parse: model, merges,
// pre-tokenizer regexes, normalizers, added tokens, post-processor, decoders), then one
// encode/decode round with what loaded.
#include <cstdint>
#include <string>

#include "moe/model/hf/hf_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto tok = moe::hf::HfTokenizer::parse(text, "fuzz/tokenizer.json", nullptr, "");
  if (tok.ok()) {
    auto ids = tok.value()->encode("Hello, world! 123 \xc3\xa9", true);
    (void)tok.value()->decode(ids);
  }
  return 0;
}
