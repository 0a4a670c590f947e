#include "moe/jinja/template.h"

#include <ctime>

#include "moe/jinja/ast.h"
#include "moe/jinja/error.h"
#include "moe/jinja/evaluator.h"
#include "moe/jinja/lexer.h"
#include "moe/jinja/parser.h"

namespace moe::jinja {
namespace {

Status to_status(const JinjaError& e) {
  if (e.raised) return invalid_argument(e.what());
  return invalid_argument((e.line > 0 ? "line " + std::to_string(e.line) + ": " : std::string()) + e.what());
}

}  // namespace

StatusOr<Template> Template::parse(const std::string& source, const TemplateOptions& options) {
  try {
    LexOptions lex_options;
    lex_options.trim_blocks = options.trim_blocks;
    lex_options.lstrip_blocks = options.lstrip_blocks;
    auto body = std::make_shared<Body>(jinja::parse(lex(source, lex_options)));
    Template t;
    t.body_ = std::move(body);
    return t;
  } catch (const JinjaError& e) {
    return to_status(e);
  }
}

StatusOr<std::string> Template::render(const nlohmann::json& context, const RenderOptions& options) const {
  if (!context.is_object()) return invalid_argument("the template context must be a JSON object");
  EvalLimits limits;
  limits.now_unix = options.now_unix >= 0 ? options.now_unix : static_cast<int64_t>(std::time(nullptr));
  limits.max_output_bytes = options.max_output_bytes;
  try {
    return evaluate(*body_, Value::from_json(context), limits);
  } catch (const JinjaError& e) {
    return to_status(e);
  }
}

}  // namespace moe::jinja
