// The Jinja lexer: template text -> tokens. Text between tags becomes kText tokens with
// the whitespace control already applied ({%- -%} {{- -}} {#- -#}, and HF's
// trim_blocks / lstrip_blocks); comments vanish; each {{ }} / {% %} becomes kExprStart /
// kStmtStart, its expression tokens, then kTagEnd. Errors (an unclosed tag, a bad
// character, an unterminated string) throw JinjaError naming the line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moe::jinja {

struct Token {
  enum class Type { kText, kExprStart, kStmtStart, kTagEnd, kName, kString, kInt, kFloat, kOp, kEof };
  Type type = Type::kEof;
  std::string text;  // kText, kName, kString (unescaped), kOp ("==", "(", ...)
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
};

struct LexOptions {
  bool trim_blocks = true;    // drop the first newline after a block tag or comment
  bool lstrip_blocks = true;  // drop spaces and tabs before a block tag or comment at a line start
};

std::vector<Token> lex(const std::string& source, const LexOptions& options);

}  // namespace moe::jinja
