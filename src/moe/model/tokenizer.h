// Tokenizer: SentencePiece (`tokenizer.model`, Llama/Mixtral style) through the
// sentencepiece library. BOS/EOS insertion follows tokenizer_config.json's
// add_bos_token / add_eos_token (defaults: true / false, as LlamaTokenizer).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "moe/model/model_source.h"
#include "moe/status.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace moe {

class Tokenizer {
 public:
  // Loads `<dir>/tokenizer.model` and, if present, `<dir>/tokenizer_config.json`.
  // NotFound / DataLoss naming the file.
  static StatusOr<std::unique_ptr<Tokenizer>> load(const std::string& dir);
  // Same, reading "tokenizer.model" and (if present) "tokenizer_config.json" through
  // `source`; messages name source.location() + "/<file>".
  static StatusOr<std::unique_ptr<Tokenizer>> load(const ModelSource& source);
  ~Tokenizer();

  // Text -> ids, with BOS (and EOS) per tokenizer_config.
  std::vector<int> encode(const std::string& text) const;
  // Text -> ids; BOS/EOS per tokenizer_config only when `add_special_tokens`.
  std::vector<int> encode(const std::string& text, bool add_special_tokens) const;
  // The bytes token `id` contributes to decoded text, resolved from the vocabulary's
  // encoding ("\u2581" -> ' ', byte-fallback "<0x0A>" -> '\n'); may be part of a
  // multi-byte UTF-8 character. Empty for special/control tokens and ids outside
  // [0, vocab_size). (Decoding a sequence can differ at its start: SentencePiece drops
  // the leading space of the first piece.)
  std::string token_bytes(int id) const;
  // True for control/special tokens (BOS, EOS, UNK, added special tokens): decode()
  // drops them. False for ids outside the vocabulary.
  bool is_special(int id) const;
  // The id of a piece or special token by its text ("<s>", "<|im_end|>"); -1 if none.
  int token_to_id(const std::string& piece) const;
  // Ids -> text; special tokens (BOS/EOS/UNK control pieces) are dropped.
  std::string decode(const std::vector<int>& ids) const;
  int vocab_size() const;
  int bos_id() const;
  int eos_id() const;
  bool add_bos() const { return add_bos_; }

 private:
  Tokenizer();
  // From the files' bytes; `config_text` null when there is no tokenizer_config.json.
  // The paths name the files in messages.
  static StatusOr<std::unique_ptr<Tokenizer>> from_bytes(const std::string& model_blob, const std::string& model_path,
                                                         const std::string* config_text, const std::string& config_path);
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  bool add_bos_ = true;
  bool add_eos_ = false;
};

}  // namespace moe
