// JsonConstraint: one sequence's grammar-constrained decoding (OpenAI response_format
// json_object / json_schema). Each step, allowed() says which tokens may come next: a
// token is allowed when the grammar accepts all its bytes from the current state
// (checked by walking the vocabulary's byte trie, so shared prefixes are checked once),
// EOS only when the value is complete, special tokens never. accept() advances by the
// chosen token.
//
// Owned by one sequence, used by one thread at a time; the grammar and vocabulary are
// shared, immutable, and kept alive by the shared pointers.
#pragma once

#include <memory>
#include <vector>

#include "moe/constrain/json_grammar.h"
#include "moe/constrain/json_state.h"
#include "moe/constrain/token_vocab.h"

namespace moe {

class JsonConstraint {
 public:
  JsonConstraint(std::shared_ptr<const JsonGrammar> grammar, std::shared_ptr<const ConstraintVocab> vocab);

  // (*allowed)[t] = 1 when token t may come next, else 0 (resized to the vocabulary).
  // Returns how many are allowed (0: no token of the vocabulary continues the value).
  int allowed(std::vector<uint8_t>* allowed);
  // Sets logits[t] = -inf for every token t in [0, n) that may not come next (tokens at
  // or past the vocabulary's size too). Returns how many are allowed.
  int mask_logits(float* logits, int n);
  // Advances by `token`; false (state unchanged) when it may not come next. EOS is
  // accepted when the value is complete and ends the value (closed() afterwards).
  bool accept(int token);

  bool complete() const { return ended_ || state_.complete(); }
  // Nothing may follow: the value is closed, or EOS was accepted. The sequence ends.
  bool closed() const { return ended_ || state_.closed(); }
  const JsonState& state() const { return state_; }

 private:
  void walk(const ByteTrie& trie, uint32_t node, size_t depth, std::vector<uint8_t>* allowed, int* count);

  std::shared_ptr<const JsonGrammar> grammar_;
  std::shared_ptr<const ConstraintVocab> vocab_;
  JsonState state_;
  bool ended_ = false;
  std::vector<JsonState> depth_states_;  // the walk's state after each byte depth
  std::vector<uint8_t> mask_;
};

}  // namespace moe
