#include "moe/constrain/json_constraint.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace moe {

JsonConstraint::JsonConstraint(std::shared_ptr<const JsonGrammar> grammar, std::shared_ptr<const ConstraintVocab> vocab)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)), state_(grammar_.get()) {
  const size_t depth = std::max(vocab_->all.max_len, vocab_->non_plain.max_len) + 1;
  depth_states_.assign(depth, JsonState(grammar_.get()));
}

void JsonConstraint::walk(const ByteTrie& trie, uint32_t node, size_t depth, std::vector<uint8_t>* allowed,
                          int* count) {
  const ByteTrie::Node& n = trie.nodes[node];
  const JsonState& from = depth == 0 ? state_ : depth_states_[depth];
  for (uint32_t e = n.edge_begin; e < n.edge_end; ++e) {
    JsonState& to = depth_states_[depth + 1];
    if (!JsonState::step(from, trie.edge_byte[e], &to)) continue;
    const ByteTrie::Node& child = trie.nodes[trie.edge_child[e]];
    for (uint32_t t = child.tok_begin; t < child.tok_end; ++t) {
      uint8_t& a = (*allowed)[static_cast<size_t>(trie.tokens[t])];
      *count += a == 0;
      a = 1;
    }
    walk(trie, trie.edge_child[e], depth + 1, allowed, count);
  }
}

int JsonConstraint::allowed(std::vector<uint8_t>* allowed) {
  const ConstraintVocab& v = *vocab_;
  allowed->assign(static_cast<size_t>(v.vocab_size), 0);
  if (ended_) return 0;
  int count = 0;
  if (v.all.nodes.empty()) return 0;
  if (state_.in_plain_string()) {
    *allowed = v.plain;
    count = v.plain_count;
    if (!v.non_plain.nodes.empty()) walk(v.non_plain, 0, 0, allowed, &count);
  } else {
    walk(v.all, 0, 0, allowed, &count);
  }
  if (state_.complete()) {
    for (int id : v.eos_ids) {
      if (id < 0 || id >= v.vocab_size) continue;
      uint8_t& a = (*allowed)[static_cast<size_t>(id)];
      count += a == 0;
      a = 1;
    }
  }
  return count;
}

int JsonConstraint::mask_logits(float* logits, int n) {
  const int count = allowed(&mask_);
  const float neg = -std::numeric_limits<float>::infinity();
  const int m = std::min(n, vocab_->vocab_size);
  const uint8_t* mask = mask_.data();
  for (int i = 0; i < m; ++i) logits[i] = mask[i] != 0 ? logits[i] : neg;  // a select: vectorizes
  for (int i = m; i < n; ++i) logits[i] = neg;
  return count;
}

bool JsonConstraint::accept(int token) {
  const ConstraintVocab& v = *vocab_;
  if (ended_) return false;
  if (std::find(v.eos_ids.begin(), v.eos_ids.end(), token) != v.eos_ids.end()) {
    if (!state_.complete()) return false;
    ended_ = true;
    return true;
  }
  if (token < 0 || token >= v.vocab_size) return false;
  const std::string& bytes = v.token_bytes[static_cast<size_t>(token)];
  return !bytes.empty() && state_.advance(bytes);
}

}  // namespace moe
