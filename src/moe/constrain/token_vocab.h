// ConstraintVocab: a model's vocabulary as byte tries, for grammar-constrained
// decoding (json_constraint.h). Built once per engine from every token's bytes
// (Tokenizer::token_bytes); immutable afterwards and shared read-only between threads.
//
// Two tries share the work of a per-step mask: `all` holds every token that can appear
// in constrained output, `non_plain` only those that are not "plain" string content.
// A plain token (valid UTF-8 with no '"', '\\' or control character) leaves a JSON
// string's state unchanged, so inside a string they are allowed wholesale (`plain`) and
// only the others are walked.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moe {

// A byte trie over token ids. Node 0 is the root (the empty prefix).
struct ByteTrie {
  struct Node {
    uint32_t edge_begin = 0, edge_end = 0;  // into edge_byte / edge_child (sorted by byte)
    uint32_t tok_begin = 0, tok_end = 0;    // into tokens: the ids whose bytes end here
  };
  std::vector<Node> nodes;
  std::vector<uint8_t> edge_byte;
  std::vector<uint32_t> edge_child;
  std::vector<int32_t> tokens;
  size_t max_len = 0;  // the longest token, in bytes

  // `ids` index `bytes`; every bytes[id] for id in ids is non-empty.
  static ByteTrie build(const std::vector<std::string>& bytes, std::vector<int32_t> ids);
};

struct ConstraintVocab {
  int vocab_size = 0;
  ByteTrie all;
  ByteTrie non_plain;
  std::vector<uint8_t> plain;  // [vocab_size] 1 = plain string content (and in `all`)
  int plain_count = 0;         // ones in `plain`
  std::vector<int> eos_ids;    // allowed exactly when the value is complete
  std::vector<std::string> token_bytes;  // [vocab_size] as given to build()

  // token_bytes[id] for id in [0, vocab_size): empty for tokens that never appear in
  // constrained output (special tokens, ids the tokenizer does not have).
  static ConstraintVocab build(const std::vector<std::string>& token_bytes, std::vector<int> eos_ids);
};

// True when `bytes` is valid UTF-8 (RFC 3629) with no '"', '\\' or byte < 0x20.
bool plain_string_bytes(const std::string& bytes);

}  // namespace moe
