// A Jinja template (the subset HF chat templates use; see docs/architecture.md, jinja/):
// parsed once, rendered many times. Parsing rejects everything the subset lacks (an
// unknown tag, filter, test, method or function, bad syntax) with InvalidArgument
// naming the feature and the line, so an unsupported template fails at load instead of
// rendering a wrong prompt. Defaults follow HF transformers' chat templates:
// trim_blocks and lstrip_blocks on, no autoescape, tojson without key sorting.
// Thread-safety: a Template is immutable; render() may run concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "moe/status.h"

namespace moe::jinja {

struct Node;

struct TemplateOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

struct RenderOptions {
  // strftime_now()'s clock, seconds since the epoch (UTC); < 0 = the system clock.
  int64_t now_unix = -1;
  size_t max_output_bytes = 64u << 20;
};

class Template {
 public:
  // InvalidArgument "line N: <what>" for a syntax error or an unsupported feature.
  static StatusOr<Template> parse(const std::string& source, const TemplateOptions& options = {});

  // Renders with `context`'s keys as variables (a JSON object; objects keep key order).
  // Built-in functions: raise_exception(msg), namespace(...), range(...), dict(...),
  // strftime_now(fmt). Errors, all InvalidArgument: raise_exception's message as given;
  // a runtime error (calling a non-callable, an attribute of an undefined value, a type
  // error, a limit) as "line N: <what>".
  StatusOr<std::string> render(const nlohmann::json& context, const RenderOptions& options = {}) const;

 private:
  std::shared_ptr<const std::vector<std::unique_ptr<Node>>> body_;
};

}  // namespace moe::jinja
