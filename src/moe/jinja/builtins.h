// The subset's filters, tests, methods and global functions. The is_* predicates are
// what the parser accepts (anything else fails at load); the apply_* functions throw
// JinjaError on a wrong argument or type (Python Jinja would raise too).
#pragma once

#include <cstdint>
#include <string>

#include "moe/jinja/value.h"

namespace moe::jinja {

bool is_filter(const std::string& name);
bool is_test(const std::string& name);
// Methods callable as value.name(...): string, dict and list methods.
bool is_method(const std::string& name);
// Functions callable by name: raise_exception, namespace, range, dict, strftime_now.
bool is_global_function(const std::string& name);

Value apply_filter(const std::string& name, const Value& input, CallArgs& args, int line);
bool apply_test(const std::string& name, const Value& value, CallArgs& args, int line);
Value call_method(const Value& object, const std::string& name, CallArgs& args, int line);
// `now_unix` (seconds since the epoch, UTC) is what strftime_now formats.
Value call_global(const std::string& name, CallArgs& args, int64_t now_unix, int line);

// Python's `a in b` (substring, list element, dict key).
bool contains(const Value& container, const Value& item, int line);
// Python iteration: a list's items, a dict's keys, a string's characters; undefined: none.
Array iterate(const Value& v, int line);

}  // namespace moe::jinja

namespace moe::jinja {
// Python ordering (<): numbers, strings (bytewise), lists lexicographically; else error.
// Returns -1, 0 or 1.
int compare_values(const Value& a, const Value& b, int line);
// Python len().
int64_t length_of(const Value& v, int line);
// UTF-8 text split into code points (each a string).
std::vector<std::string> code_points(const std::string& s);
}  // namespace moe::jinja

// Helpers shared by builtins.cc and filters.cc.
namespace moe::jinja {
// Argument `i` (positional) or `name` (keyword), else `fallback`.
Value arg(CallArgs& a, size_t i, const char* name, Value fallback = Value());
const std::string& need_string(const Value& v, const std::string& what, int line);
int64_t need_int(const Value& v, const std::string& what, int line);
std::string upper(std::string s);
std::string lower(std::string s);
std::string capitalize(const std::string& s);
std::string title(const std::string& s);
// chars: a string of characters to drop, or none/undefined for whitespace.
std::string strip(const std::string& s, const Value& chars, bool left, bool right);
std::string replace(const std::string& s, const std::string& from, const std::string& to, int64_t count);
Value split(const std::string& s, const Value& sep, int64_t maxsplit, int line);
// "a.b.0": nested dict keys / list indices; undefined when absent.
Value attribute_of(const Value& v, const std::string& path);
std::string join(const Value& seq, const std::string& sep, const Value& attr, int line);
// select/reject (by_attr false) and selectattr/rejectattr (true); keep = select.
Value select(const Value& seq, CallArgs& a, bool by_attr, bool keep, int line);
}  // namespace moe::jinja
