#include "moe/model/hf/utf8_util.h"

#include <array>

namespace moe::hf {
namespace {

struct ByteTables {
  std::array<char32_t, 256> to_char{};
  std::array<std::string, 256> to_utf8{};
  std::array<int, 256 + 68> from_char{};  // code point -> byte, -1 for none
  ByteTables() {
    from_char.fill(-1);
    char32_t extra = 256;
    for (int b = 0; b < 256; ++b) {
      const bool self = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[b] = self ? static_cast<char32_t>(b) : extra++;
      append_utf8(to_utf8[b], to_char[b]);
      from_char[to_char[b]] = b;
    }
  }
};

const ByteTables& tables() {
  static const ByteTables t;
  return t;
}

bool is_cont(unsigned char c) { return (c & 0xC0) == 0x80; }

// Length of the valid UTF-8 sequence at s[i], or 0 if invalid; *valid_prefix receives
// how many bytes form a maximal valid prefix of some sequence (>= 1).
size_t valid_seq(std::string_view s, size_t i, size_t* valid_prefix) {
  const auto c0 = static_cast<unsigned char>(s[i]);
  *valid_prefix = 1;
  if (c0 < 0x80) return 1;
  int need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c0 >= 0xC2 && c0 <= 0xDF) {
    need = 1;
  } else if (c0 >= 0xE0 && c0 <= 0xEF) {
    need = 2;
    if (c0 == 0xE0) lo = 0xA0;
    if (c0 == 0xED) hi = 0x9F;
  } else if (c0 >= 0xF0 && c0 <= 0xF4) {
    need = 3;
    if (c0 == 0xF0) lo = 0x90;
    if (c0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (int k = 1; k <= need; ++k) {
    if (i + k >= s.size()) return 0;
    const auto c = static_cast<unsigned char>(s[i + k]);
    const bool ok = k == 1 ? (c >= lo && c <= hi) : is_cont(c);
    if (!ok) return 0;
    *valid_prefix = static_cast<size_t>(k) + 1;
  }
  return static_cast<size_t>(need) + 1;
}

}  // namespace

int utf8_len(unsigned char lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  if (lead < 0xF8) return 4;
  return 1;
}

char32_t next_code_point(std::string_view s, size_t& i) {
  size_t prefix = 0;
  const size_t n = valid_seq(s, i, &prefix);
  if (n == 0) {
    ++i;
    return 0xFFFD;
  }
  const auto c0 = static_cast<unsigned char>(s[i]);
  char32_t cp = n == 1 ? c0 : n == 2 ? (c0 & 0x1F) : n == 3 ? (c0 & 0x0F) : (c0 & 0x07);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string utf8_lossy(std::string_view bytes) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    size_t prefix = 0;
    const size_t n = valid_seq(bytes, i, &prefix);
    if (n > 0) {
      out.append(bytes.substr(i, n));
      i += n;
    } else {
      out.append(kReplacement);
      i += prefix;
    }
  }
  return out;
}

char32_t byte_to_char(unsigned char b) { return tables().to_char[b]; }

int char_to_byte(char32_t cp) { return cp < 256 + 68 ? tables().from_char[cp] : -1; }

std::string byte_level_encode(std::string_view text) {
  const ByteTables& t = tables();
  std::string out;
  out.reserve(text.size() * 2);
  for (unsigned char b : text) out.append(t.to_utf8[b]);
  return out;
}

bool byte_level_decode(std::string_view token, std::string* out) {
  std::string bytes;
  bytes.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    const int b = char_to_byte(next_code_point(token, i));
    if (b < 0) return false;
    bytes.push_back(static_cast<char>(b));
  }
  out->append(bytes);
  return true;
}

}  // namespace moe::hf
