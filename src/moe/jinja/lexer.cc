#include "moe/jinja/lexer.h"

#include <cctype>
#include <charconv>

#include "moe/jinja/error.h"

namespace moe::jinja {
namespace {

enum class TagKind { kExpr, kStmt, kComment };

struct RawTag {
  TagKind kind;
  size_t open, body_begin, body_end, close_end;  // source offsets
  bool strip_before = false, strip_after = false, plus_before = false, plus_after = false;
  int line;
};

int line_at(const std::string& s, size_t pos, size_t from, int line_from) {
  for (size_t i = from; i < pos && i < s.size(); ++i) {
    if (s[i] == '\n') ++line_from;
  }
  return line_from;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Finds the end of the tag opened at `open`: skips string literals in expressions.
RawTag scan_tag(const std::string& s, size_t open, int line) {
  RawTag t;
  t.open = open;
  t.line = line;
  const char c = s[open + 1];
  t.kind = c == '{' ? TagKind::kExpr : c == '%' ? TagKind::kStmt : TagKind::kComment;
  size_t p = open + 2;
  if (p < s.size() && s[p] == '-') {
    t.strip_before = true;
    ++p;
  } else if (p < s.size() && s[p] == '+') {
    t.plus_before = true;
    ++p;
  }
  t.body_begin = p;
  const std::string close = t.kind == TagKind::kExpr ? "}}" : t.kind == TagKind::kStmt ? "%}" : "#}";
  if (t.kind == TagKind::kComment) {
    const size_t e = s.find(close, p);
    if (e == std::string::npos) fail("unclosed comment (no \"#}\")", line);
    t.body_end = e;
    t.close_end = e + 2;
  } else {
    char quote = 0;
    size_t i = p;
    for (; i < s.size(); ++i) {
      const char ch = s[i];
      if (quote) {
        if (ch == '\\') ++i;
        else if (ch == quote) quote = 0;
        continue;
      }
      if (ch == '\'' || ch == '"') {
        quote = ch;
      } else if (s.compare(i, 2, close) == 0) {
        break;
      }
    }
    if (i >= s.size()) fail(std::string("unclosed tag (no \"") + close + "\")", line);
    t.body_end = i;
    t.close_end = i + 2;
  }
  if (t.body_end > t.body_begin && s[t.body_end - 1] == '-') {
    t.strip_after = true;
    --t.body_end;
  } else if (t.body_end > t.body_begin && s[t.body_end - 1] == '+') {
    t.plus_after = true;
    --t.body_end;
  }
  return t;
}

char unescape(char c) {
  switch (c) {
    case 'n': return '\n';
    case 't': return '\t';
    case 'r': return '\r';
    case 'b': return '\b';
    case 'f': return '\f';
    case '0': return '\0';
    default: return c;  // \\ \' \" and unknown escapes keep the character
  }
}

void lex_expression(const std::string& s, size_t begin, size_t end, int line, std::vector<Token>* out) {
  static const char* kOps2[] = {"==", "!=", "<=", ">=", "//", "**"};
  size_t i = begin;
  while (i < end) {
    const char c = s[i];
    if (is_space(c)) {
      if (c == '\n') ++line;
      ++i;
      continue;
    }
    Token tok;
    tok.line = line;
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < end && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      tok.type = Token::Type::kName;
      tok.text = s.substr(i, j - i);
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < end && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      bool is_float = false;
      if (j + 1 < end && s[j] == '.' && std::isdigit(static_cast<unsigned char>(s[j + 1]))) {
        is_float = true;
        ++j;
        while (j < end && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      }
      if (j < end && (s[j] == 'e' || s[j] == 'E')) {
        size_t k = j + 1;
        if (k < end && (s[k] == '+' || s[k] == '-')) ++k;
        if (k < end && std::isdigit(static_cast<unsigned char>(s[k]))) {
          is_float = true;
          j = k;
          while (j < end && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
        }
      }
      std::string digits;
      for (size_t k = i; k < j; ++k) {
        if (s[k] != '_') digits += s[k];
      }
      if (is_float) {
        tok.type = Token::Type::kFloat;
        auto r = std::from_chars(digits.data(), digits.data() + digits.size(), tok.float_value);
        if (r.ec != std::errc()) fail("bad number '" + digits + "'", line);
      } else {
        tok.type = Token::Type::kInt;
        auto r = std::from_chars(digits.data(), digits.data() + digits.size(), tok.int_value);
        if (r.ec != std::errc()) fail("integer literal '" + digits + "' out of range", line);
      }
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string v;
      size_t j = i + 1;
      for (; j < end && s[j] != c; ++j) {
        if (s[j] == '\n') ++line;
        if (s[j] == '\\' && j + 1 < end) {
          v += unescape(s[++j]);
        } else {
          v += s[j];
        }
      }
      if (j >= end) fail("unterminated string literal", tok.line);
      tok.type = Token::Type::kString;
      tok.text = std::move(v);
      i = j + 1;
    } else {
      tok.type = Token::Type::kOp;
      for (const char* op : kOps2) {
        if (s.compare(i, 2, op) == 0) tok.text = op;
      }
      if (tok.text.empty()) {
        if (std::string("+-*/%~|.,:()[]{}=<>").find(c) == std::string::npos) {
          fail(std::string("unexpected character '") + c + "' in a tag", line);
        }
        tok.text = std::string(1, c);
      }
      i += tok.text.size();
    }
    out->push_back(std::move(tok));
  }
}

}  // namespace

std::vector<Token> lex(const std::string& source, const LexOptions& options) {
  // Jinja's keep_trailing_newline=False: one trailing newline of the template is dropped.
  const std::string s = !source.empty() && source.back() == '\n' ? source.substr(0, source.size() - 1) : source;
  // 1. Tags.
  std::vector<RawTag> tags;
  int line = 1;
  size_t line_pos = 0;
  for (size_t pos = 0;;) {
    size_t open = std::string::npos;
    for (size_t p = s.find('{', pos); p != std::string::npos; p = s.find('{', p + 1)) {
      if (p + 1 < s.size() && (s[p + 1] == '{' || s[p + 1] == '%' || s[p + 1] == '#')) {
        open = p;
        break;
      }
    }
    if (open == std::string::npos) break;
    line = line_at(s, open, line_pos, line);
    line_pos = open;
    tags.push_back(scan_tag(s, open, line));
    pos = tags.back().close_end;
  }
  // 2. Text between tags, trimmed; tags' tokens.
  std::vector<Token> out;
  size_t text_begin = 0;
  int text_line = 1;
  for (size_t k = 0; k <= tags.size(); ++k) {
    const size_t text_end = k < tags.size() ? tags[k].open : s.size();
    size_t a = text_begin, b = text_end;
    if (k > 0) {
      const RawTag& prev = tags[k - 1];
      if (prev.strip_after) {
        while (a < b && is_space(s[a])) ++a;
      } else if (options.trim_blocks && prev.kind != TagKind::kExpr && !prev.plus_after) {
        if (a < b && s[a] == '\n') ++a;
        else if (a + 1 < b && s[a] == '\r' && s[a + 1] == '\n') a += 2;
      }
    }
    if (k < tags.size()) {
      const RawTag& next = tags[k];
      if (next.strip_before) {
        while (b > a && is_space(s[b - 1])) --b;
      } else if (options.lstrip_blocks && next.kind != TagKind::kExpr && !next.plus_before) {
        size_t c = text_end;
        while (c > text_begin && (s[c - 1] == ' ' || s[c - 1] == '\t')) --c;
        if (c == 0 || s[c - 1] == '\n') b = std::max(a, std::min(b, c));
      }
    }
    if (b > a) {
      Token t;
      t.type = Token::Type::kText;
      t.text = s.substr(a, b - a);
      t.line = text_line;
      out.push_back(std::move(t));
    }
    if (k == tags.size()) break;
    const RawTag& tag = tags[k];
    if (tag.kind != TagKind::kComment) {
      Token start;
      start.type = tag.kind == TagKind::kExpr ? Token::Type::kExprStart : Token::Type::kStmtStart;
      start.line = tag.line;
      out.push_back(start);
      lex_expression(s, tag.body_begin, tag.body_end, tag.line, &out);
      Token end;
      end.type = Token::Type::kTagEnd;
      end.line = line_at(s, tag.close_end, tag.open, tag.line);
      out.push_back(end);
    }
    text_begin = tag.close_end;
    text_line = line_at(s, text_begin, tag.open, tag.line);
  }
  Token eof;
  eof.line = line_at(s, s.size(), 0, 1);
  out.push_back(eof);
  return out;
}

}  // namespace moe::jinja
