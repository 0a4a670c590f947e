// libFuzzer target: arbitrary text (any bytes, invalid UTF-8 included) through the
// shipped models' tokenizers: SentencePiece (tiny Mixtral) and tokenizer.json byte-level
// BPE (GPT-2's, tests/data/tokenizers/gpt2): encode with and without special tokens, decode, token_bytes.
#include <cstdint>
#include <memory>
#include <string>

#include "moe/model/tokenizer.h"

namespace {

std::unique_ptr<moe::Tokenizer> load(const char* model) {
  auto t = moe::Tokenizer::load(std::string(MOE_SOURCE_DIR) + "/models/" + model);
  if (!t.ok()) __builtin_trap();  // the shipped tokenizers must load
  return std::move(t).value();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto sp = load("tiny-mixtral-shakespeare");
  static const auto bpe = load("../tests/data/tokenizers/gpt2");
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (const moe::Tokenizer* t : {sp.get(), bpe.get()}) {
    auto ids = t->encode(text, true);
    (void)t->encode(text, false);
    for (int id : ids) {
      if (id < 0 || id >= t->vocab_size()) __builtin_trap();  // ids inside the vocabulary
      (void)t->token_bytes(id);
    }
    (void)t->decode(ids);
  }
  return 0;
}
