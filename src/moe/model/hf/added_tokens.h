// Added tokens of tokenizer.json ("added_tokens", plus tokenizer_config.json's
// added_tokens_decoder) and how text is split at them before pre-tokenization, as
// Hugging Face's AddedVocabulary does: leftmost-longest match, single_word, lstrip and
// rstrip; tokens with normalized=false are matched in the raw text, the others in the
// normalized text. Internal to src/moe/model.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

namespace moe::hf {

struct AddedToken {
  int id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

// A piece of input: an added token (id >= 0) or text still to tokenize (id == -1).
struct Segment {
  int id = -1;
  std::string text;
};

class AddedTokenMatcher {
 public:
  // `tokens` are the ones to match; `contents` their strings to look for (the
  // normalized content for normalized tokens).
  void add(const AddedToken& token, const std::string& content);
  bool empty() const { return tokens_.empty(); }
  // Splits `text` at the tokens (appends to `out`).
  void split(const std::string& text, std::vector<Segment>* out) const;

 private:
  struct Entry {
    std::string content;
    AddedToken token;
  };
  std::vector<Entry> tokens_;
  // first byte -> indices into tokens_, longest content first
  std::unordered_map<unsigned char, std::vector<size_t>> by_first_byte_;
};

}  // namespace moe::hf
