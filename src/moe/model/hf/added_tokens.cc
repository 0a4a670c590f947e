#include "moe/model/hf/added_tokens.h"

#include <algorithm>

#include "moe/model/hf/utf8_util.h"

namespace moe::hf {
namespace {

// Rust's char::is_whitespace (Unicode White_Space).
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_word_char(char32_t c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c >= 0x80;
}

// The code point that ends at byte `end` of s (end > 0).
char32_t code_point_before(const std::string& s, size_t end, size_t* start) {
  size_t b = end - 1;
  while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  *start = b;
  size_t i = b;
  return next_code_point(s, i);
}

}  // namespace

void AddedTokenMatcher::add(const AddedToken& token, const std::string& content) {
  if (content.empty()) return;
  tokens_.push_back({content, token});
  auto& list = by_first_byte_[static_cast<unsigned char>(content[0])];
  list.push_back(tokens_.size() - 1);
  std::stable_sort(list.begin(), list.end(),
                   [&](size_t a, size_t b) { return tokens_[a].content.size() > tokens_[b].content.size(); });
}

void AddedTokenMatcher::split(const std::string& text, std::vector<Segment>* out) const {
  size_t emitted = 0;  // text[0, emitted) is already in out
  size_t pos = 0;
  while (pos < text.size()) {
    auto it = by_first_byte_.find(static_cast<unsigned char>(text[pos]));
    const Entry* hit = nullptr;
    if (it != by_first_byte_.end()) {
      for (size_t k : it->second) {
        if (text.compare(pos, tokens_[k].content.size(), tokens_[k].content) == 0) {
          hit = &tokens_[k];
          break;
        }
      }
    }
    if (hit == nullptr) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + hit->content.size();
    if (hit->token.single_word) {
      size_t s0 = 0;
      const bool word_before = start > 0 && is_word_char(code_point_before(text, start, &s0));
      size_t i = stop;
      const bool word_after = stop < text.size() && is_word_char(next_code_point(text, i));
      if (word_before || word_after) {
        ++pos;
        continue;
      }
    }
    if (hit->token.lstrip) {
      while (start > emitted) {
        size_t s0 = 0;
        if (!is_white_space(code_point_before(text, start, &s0))) break;
        start = s0;
      }
    }
    if (hit->token.rstrip) {
      while (stop < text.size()) {
        size_t i = stop;
        if (!is_white_space(next_code_point(text, i))) break;
        stop = i;
      }
    }
    if (start > emitted) out->push_back({-1, text.substr(emitted, start - emitted)});
    out->push_back({hit->token.id, hit->content});
    emitted = stop;
    pos = std::max(stop, pos + hit->content.size());
  }
  if (emitted < text.size()) out->push_back({-1, text.substr(emitted)});
}

}  // namespace moe::hf
