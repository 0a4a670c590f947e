// The Jinja module's internal error: thrown inside the lexer, parser and evaluator and
// turned into a Status (InvalidArgument naming the line) by template.cc, the module's
// only entry point; it never leaves the module.
#pragma once

#include <stdexcept>
#include <string>

namespace moe::jinja {

struct JinjaError : std::runtime_error {
  JinjaError(std::string message, int line_no = 0) : std::runtime_error(std::move(message)), line(line_no) {}
  int line;  // 1-based; 0 = unknown
  // raise_exception(msg): the message is the template author's, passed through as is.
  bool raised = false;
};

[[noreturn]] inline void fail(const std::string& message, int line = 0) { throw JinjaError(message, line); }

}  // namespace moe::jinja
