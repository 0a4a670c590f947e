// The Jinja parser: tokens (lexer.h) -> a Body (ast.h). Everything the subset lacks fails
// here, at load, never while rendering: an unknown tag, filter, test, string/dict method
// or function, and bad syntax throw JinjaError naming the feature and its line.
#pragma once

#include <vector>

#include "moe/jinja/ast.h"
#include "moe/jinja/lexer.h"

namespace moe::jinja {

Body parse(const std::vector<Token>& tokens);

}  // namespace moe::jinja
