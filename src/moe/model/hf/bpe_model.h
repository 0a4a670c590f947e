// tokenizer.json "model" of type BPE: vocabulary, ranked merges ("a b" strings or
// ["a", "b"] pairs), unk_token/fuse_unk, byte_fallback and ignore_merges (Llama-3).
// Other model types (WordPiece, Unigram, WordLevel), dropout and
// continuing_subword_prefix/end_of_word_suffix are refused naming the field. Internal to
// src/moe/model.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "moe/model/hf/json_util.h"

namespace moe::hf {

class BpeModel {
 public:
  // `where` names the model object ("<file>: model"). DataLoss for a malformed vocab, a
  // merge whose parts or result are not in the vocabulary, or a malformed merge entry.
  static StatusOr<std::unique_ptr<BpeModel>> parse(const Json& j, const std::string& where);

  // Appends the ids of one pre-tokenized word. Thread-safe (a bounded cache inside).
  void encode_word(const std::string& word, std::vector<int>* ids) const;

  // The vocabulary token of `id`, or nullptr.
  const std::string* id_to_token(int id) const;
  int token_to_id(const std::string& token) const;  // -1 if absent
  // 1 + the largest vocabulary id.
  int size() const { return static_cast<int>(id_to_token_.size()); }

 private:
  BpeModel() = default;
  void merge_word(const std::string& word, std::vector<int>* ids) const;

  std::unordered_map<std::string, int> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  // (left id << 32 | right id) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<int, int>> merges_;
  int unk_id_ = -1;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  int byte_ids_[256];  // "<0xAB>" tokens for byte_fallback; -1 if absent

  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int>> cache_;
};

}  // namespace moe::hf
