// The tokenizer.json backend of moe::Tokenizer: Hugging Face's pipeline (added tokens ->
// normalizer -> pre-tokenizer -> BPE model -> post-processor; decoder for the way back).
// Internal to src/moe/model.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "moe/model/hf/added_tokens.h"
#include "moe/model/hf/bpe_model.h"
#include "moe/model/hf/normalizer.h"
#include "moe/model/hf/pre_tokenizer.h"
#include "moe/model/hf/token_decoder.h"

namespace moe::hf {

class HfTokenizer {
 public:
  // From the bytes of tokenizer.json and (may be null) tokenizer_config.json; the paths
  // name the files in messages. DataLoss naming the file and field for malformed JSON,
  // an unsupported component type, bad merges or a regex PCRE2 cannot compile.
  static StatusOr<std::unique_ptr<HfTokenizer>> parse(const std::string& json_text, const std::string& json_path,
                                                      const std::string* config_text, const std::string& config_path);

  // Added-token text (special or not) in `text` always encodes to the token; the
  // post-processor (e.g. Llama-3's BOS) runs only when `add_special_tokens`. For
  // tokenizer_class LlamaTokenizer(Fast) (DeepSeek-V3), tokenizer_config.json's
  // add_bos_token / add_eos_token decide instead, as transformers does.
  std::vector<int> encode(const std::string& text, bool add_special_tokens) const;
  // Special tokens are skipped; invalid UTF-8 (a character split at the end) becomes
  // U+FFFD as in Hugging Face.
  std::string decode(const std::vector<int>& ids) const;
  std::string token_bytes(int id) const;
  bool is_special(int id) const;
  int token_to_id(const std::string& token) const;
  int vocab_size() const { return vocab_size_; }
  int bos_id() const { return bos_id_; }
  int eos_id() const { return eos_id_; }
  // True when encoding with special tokens prepends one (the post-processor's template).
  bool add_bos() const { return !prefix_ids_.empty(); }

 private:
  HfTokenizer() = default;
  Status parse_post_processor(const Json& j, const std::string& where);
  // The string of `id` (an added token's content or the model's token), or nullptr.
  const std::string* token_string(int id) const;

  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<TokenDecoder> decoder_;
  std::unordered_map<int, AddedToken> added_;  // by id
  std::unordered_map<std::string, int> added_by_content_;
  AddedTokenMatcher raw_matcher_;         // normalized == false
  AddedTokenMatcher normalized_matcher_;  // normalized == true
  std::vector<int> prefix_ids_, suffix_ids_;  // TemplateProcessing "single" around the sequence
  int vocab_size_ = 0;
  int bos_id_ = -1;
  int eos_id_ = -1;
};

}  // namespace moe::hf
