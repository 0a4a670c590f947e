#include "moe/constrain/token_vocab.h"

#include <algorithm>

namespace moe {
namespace {

// Builds the node for ids[lo, hi) (sorted by bytes, all sharing their first `depth`
// bytes); returns its index.
uint32_t build_node(ByteTrie& t, const std::vector<std::string>& bytes, const std::vector<int32_t>& ids, size_t lo,
                    size_t hi, size_t depth) {
  const uint32_t index = static_cast<uint32_t>(t.nodes.size());
  t.nodes.emplace_back();
  auto at = [&](size_t i) -> const std::string& { return bytes[static_cast<size_t>(ids[i])]; };
  ByteTrie::Node node;
  node.tok_begin = static_cast<uint32_t>(t.tokens.size());
  while (lo < hi && at(lo).size() == depth) t.tokens.push_back(ids[lo++]);
  node.tok_end = static_cast<uint32_t>(t.tokens.size());
  // Children: one per distinct byte at `depth`.
  std::vector<size_t> starts;
  for (size_t i = lo; i < hi; ++i) {
    if (i == lo || at(i)[depth] != at(i - 1)[depth]) starts.push_back(i);
  }
  node.edge_begin = static_cast<uint32_t>(t.edge_byte.size());
  node.edge_end = node.edge_begin + static_cast<uint32_t>(starts.size());
  t.edge_byte.resize(node.edge_end);
  t.edge_child.resize(node.edge_end);
  for (size_t g = 0; g < starts.size(); ++g) {
    const size_t end = g + 1 < starts.size() ? starts[g + 1] : hi;
    t.edge_byte[node.edge_begin + g] = static_cast<uint8_t>(at(starts[g])[depth]);
    const uint32_t child = build_node(t, bytes, ids, starts[g], end, depth + 1);
    t.edge_child[node.edge_begin + g] = child;
  }
  t.nodes[index] = node;
  return index;
}

}  // namespace

ByteTrie ByteTrie::build(const std::vector<std::string>& bytes, std::vector<int32_t> ids) {
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    const std::string& x = bytes[static_cast<size_t>(a)];
    const std::string& y = bytes[static_cast<size_t>(b)];
    return x < y || (x == y && a < b);
  });
  ByteTrie t;
  for (int32_t id : ids) t.max_len = std::max(t.max_len, bytes[static_cast<size_t>(id)].size());
  build_node(t, bytes, ids, 0, ids.size(), 0);
  return t;
}

bool plain_string_bytes(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<uint8_t>(s[i]);
    if (c < 0x80) {
      if (c < 0x20 || c == '"' || c == '\\') return false;
      ++i;
      continue;
    }
    int n = 0, lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) n = 1;
    else if (c == 0xE0) n = 2, lo = 0xA0;
    else if (c == 0xED) n = 2, hi = 0x9F;
    else if (c >= 0xE1 && c <= 0xEF) n = 2;
    else if (c == 0xF0) n = 3, lo = 0x90;
    else if (c == 0xF4) n = 3, hi = 0x8F;
    else if (c >= 0xF1 && c <= 0xF3) n = 3;
    else return false;
    if (i + static_cast<size_t>(n) >= s.size()) return false;  // cut short
    for (int k = 1; k <= n; ++k) {
      const auto d = static_cast<uint8_t>(s[i + static_cast<size_t>(k)]);
      if (d < lo || d > hi) return false;
      lo = 0x80, hi = 0xBF;
    }
    i += static_cast<size_t>(n) + 1;
  }
  return true;
}

ConstraintVocab ConstraintVocab::build(const std::vector<std::string>& token_bytes, std::vector<int> eos_ids) {
  ConstraintVocab v;
  v.vocab_size = static_cast<int>(token_bytes.size());
  v.plain.assign(token_bytes.size(), 0);
  std::vector<int32_t> all, non_plain;
  for (size_t id = 0; id < token_bytes.size(); ++id) {
    if (token_bytes[id].empty()) continue;
    all.push_back(static_cast<int32_t>(id));
    if (plain_string_bytes(token_bytes[id])) {
      v.plain[id] = 1;
      ++v.plain_count;
    } else {
      non_plain.push_back(static_cast<int32_t>(id));
    }
  }
  v.all = ByteTrie::build(token_bytes, std::move(all));
  v.non_plain = ByteTrie::build(token_bytes, std::move(non_plain));
  v.eos_ids = std::move(eos_ids);
  v.token_bytes = token_bytes;
  return v;
}

}  // namespace moe
