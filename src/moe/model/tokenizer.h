// Tokenizer: a facade over two backends with the same meaning for every method:
//  - Hugging Face `tokenizer.json` (byte-level BPE as Qwen2/3, DeepSeek-V3, Llama-3 and
//    GPT-2 ship it; src/moe/model/hf/), used when the file is present. BOS/EOS come from
//    its post-processor (TemplateProcessing), or for tokenizer_class LlamaTokenizerFast
//    from tokenizer_config.json's add_bos_token/add_eos_token as transformers does;
//    bos_id/eos_id from tokenizer_config.json's bos_token/eos_token (a string or
//    {"content": ...}).
//  - SentencePiece (`tokenizer.model`, Llama/Mixtral style) through the sentencepiece
//    library otherwise. BOS/EOS insertion follows tokenizer_config.json's add_bos_token /
//    add_eos_token (defaults: true / false, as LlamaTokenizer).
// Special-token text in the input ("<|im_start|>", "<s>", "</s>", "<unk>") encodes to
// the special token in both backends, as Hugging Face does (chat templates emit
// bos_token as text); for SentencePiece the text between such tokens is encoded piece
// by piece, each with SentencePiece's dummy prefix, as HF's Llama tokenizers do.
// Thread-safety: all const methods may be called concurrently.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "moe/model/model_source.h"
#include "moe/status.h"

namespace sentencepiece {
class SentencePieceProcessor;
}
namespace moe::hf {
class HfTokenizer;
}

namespace moe {

class Tokenizer {
 public:
  // Loads `<dir>/tokenizer.json` if present, else `<dir>/tokenizer.model`, and (if
  // present) `<dir>/tokenizer_config.json`. NotFound naming both files when neither is
  // there; DataLoss naming the file (and the field, for tokenizer.json).
  static StatusOr<std::unique_ptr<Tokenizer>> load(const std::string& dir);
  // Same, reading the files through `source`; messages name source.location() +
  // "/<file>".
  static StatusOr<std::unique_ptr<Tokenizer>> load(const ModelSource& source);
  ~Tokenizer();

  // Text -> ids, with BOS (and EOS) per tokenizer_config.
  std::vector<int> encode(const std::string& text) const;
  // Text -> ids; BOS/EOS per tokenizer_config only when `add_special_tokens`.
  std::vector<int> encode(const std::string& text, bool add_special_tokens) const;
  // The bytes token `id` contributes to decoded text, resolved from the vocabulary's
  // encoding ("\u2581" -> ' ', byte-fallback "<0x0A>" -> '\n', byte-level "\u0120" ->
  // ' '); may be part of a multi-byte UTF-8 character. Empty for special/control tokens
  // and ids outside [0, vocab_size). (Decoding a sequence can differ at its start:
  // SentencePiece drops the leading space of the first piece.)
  std::string token_bytes(int id) const;
  // True for control/special tokens (BOS, EOS, UNK, added special tokens): decode()
  // drops them. False for ids outside the vocabulary.
  bool is_special(int id) const;
  // The id of a piece or special token by its text ("<s>", "<|im_end|>"); -1 if none.
  int token_to_id(const std::string& piece) const;
  // Ids -> text; special tokens (BOS/EOS/UNK control pieces) are dropped. Bytes that
  // are not valid UTF-8 (a character split by the end of `ids`) become U+FFFD, as in
  // Hugging Face, so streaming can hold them back until the character completes.
  std::string decode(const std::vector<int>& ids) const;
  int vocab_size() const;
  int bos_id() const;
  int eos_id() const;
  bool add_bos() const;
  // The file the tokenizer came from: "tokenizer.json" or "tokenizer.model".
  const char* file_name() const { return hf_ ? "tokenizer.json" : "tokenizer.model"; }

 private:
  Tokenizer();
  // From the files' bytes; `config_text` null when there is no tokenizer_config.json.
  // The paths name the files in messages.
  static StatusOr<std::unique_ptr<Tokenizer>> from_bytes(const std::string& model_blob, const std::string& model_path,
                                                         const std::string* config_text, const std::string& config_path);
  // SentencePiece: ids of the text with control pieces in it matched as tokens.
  std::vector<int> sp_encode(const std::string& text) const;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::unique_ptr<hf::HfTokenizer> hf_;  // set for tokenizer.json; then sp_ is unused
  std::vector<std::pair<std::string, int>> sp_specials_;  // control/unknown pieces, longest first
  bool add_bos_ = true;
  bool add_eos_ = false;
};

}  // namespace moe
