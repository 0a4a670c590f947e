// Walks a parsed Body (ast.h) with a context and writes the output. Internal to the
// module (template.cc is the entry point); throws JinjaError.
#pragma once

#include <cstdint>
#include <string>

#include "moe/jinja/ast.h"

namespace moe::jinja {

struct EvalLimits {
  int64_t now_unix = 0;                  // what strftime_now formats
  size_t max_output_bytes = 64u << 20;   // the rendered text's cap
  int64_t max_iterations = 10'000'000;   // for-loop iterations, all loops together
  int max_macro_depth = 64;              // nested macro calls
};

// `context`: a dict of the template's variables (messages, bos_token, ...).
std::string evaluate(const Body& body, const Value& context, const EvalLimits& limits);

}  // namespace moe::jinja
