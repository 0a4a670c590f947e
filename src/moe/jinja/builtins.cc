#include "moe/jinja/builtins.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>
#include <set>

#include "moe/jinja/error.h"

namespace moe::jinja {
namespace {

const std::set<std::string>& filter_names() {
  static const std::set<std::string> k = {
      "trim", "length", "count", "tojson", "upper", "lower", "capitalize", "title", "join", "default", "d",
      "first", "last", "items", "string", "int", "float", "replace", "list", "map", "selectattr", "rejectattr",
      "select", "reject", "abs", "reverse", "unique", "safe", "round", "indent", "sum", "min", "max", "sort"};
  return k;
}
const std::set<std::string>& test_names() {
  static const std::set<std::string> k = {
      "defined", "undefined", "none", "string", "number", "integer", "float", "mapping", "iterable", "sequence",
      "boolean", "true", "false", "callable", "eq", "equalto", "ne", "lt", "lessthan", "gt", "greaterthan", "le",
      "ge", "in", "odd", "even", "divisibleby", "lower", "upper", "sameas"};
  return k;
}
const std::set<std::string>& method_names() {
  static const std::set<std::string> k = {"strip", "lstrip", "rstrip", "split", "startswith", "endswith",
                                          "replace", "upper", "lower", "title", "capitalize", "find", "count",
                                          "join", "get", "items", "keys", "values"};
  return k;
}

}  // namespace

// Argument `i` (positional) or `name` (keyword), else `fallback`.
Value arg(CallArgs& a, size_t i, const char* name, Value fallback) {
  for (auto& [k, v] : a.kwargs) {
    if (k == name) return v;
  }
  return i < a.args.size() ? a.args[i] : fallback;
}
const std::string& need_string(const Value& v, const std::string& what, int line) {
  if (!v.is_string()) fail(what + " needs a string, got " + v.type_name(), line);
  return v.str();
}
int64_t need_int(const Value& v, const std::string& what, int line) {
  if (!v.is_int() && !v.is_bool()) fail(what + " needs an integer, got " + v.type_name(), line);
  return v.as_int();
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}
std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string capitalize(const std::string& s) {
  std::string out = lower(s);
  if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}
// str.title(): a letter after a non-letter is upper-cased, other letters lower-cased.
std::string title(const std::string& s) {
  std::string out = s;
  bool prev_letter = false;
  for (char& c : out) {
    const bool letter = std::isalpha(static_cast<unsigned char>(c)) != 0;
    if (letter) c = static_cast<char>(prev_letter ? std::tolower(static_cast<unsigned char>(c))
                                                  : std::toupper(static_cast<unsigned char>(c)));
    prev_letter = letter;
  }
  return out;
}
bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
std::string strip(const std::string& s, const Value& chars, bool left, bool right) {
  auto drop = [&](char c) { return chars.is_string() ? chars.str().find(c) != std::string::npos : is_ws(c); };
  size_t a = 0, b = s.size();
  if (left) {
    while (a < b && drop(s[a])) ++a;
  }
  if (right) {
    while (b > a && drop(s[b - 1])) --b;
  }
  return s.substr(a, b - a);
}
std::string replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  size_t pos = 0;
  if (from.empty()) {  // Python: insert `to` around every character
    for (const std::string& cp : code_points(s)) {
      if (count-- != 0) out += to;
      out += cp;
    }
    if (count != 0) out += to;
    return out;
  }
  while (count != 0) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
    --count;
  }
  out.append(s, pos, std::string::npos);
  return out;
}
Value split(const std::string& s, const Value& sep, int64_t maxsplit, int line) {
  Array out;
  if (sep.is_none() || sep.is_undefined()) {
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && is_ws(s[i])) ++i;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        size_t e = s.size();
        while (e > i && is_ws(s[e - 1])) --e;
        out.push_back(Value::string(s.substr(i, e - i)));
        break;
      }
      size_t j = i;
      while (j < s.size() && !is_ws(s[j])) ++j;
      out.push_back(Value::string(s.substr(i, j - i)));
      i = j;
    }
    return Value::array(std::move(out));
  }
  const std::string& d = need_string(sep, "split()", line);
  if (d.empty()) fail("split(): empty separator", line);
  size_t pos = 0;
  for (;;) {
    const size_t hit = maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit ? std::string::npos : s.find(d, pos);
    if (hit == std::string::npos) {
      out.push_back(Value::string(s.substr(pos)));
      break;
    }
    out.push_back(Value::string(s.substr(pos, hit - pos)));
    pos = hit + d.size();
  }
  return Value::array(std::move(out));
}
static bool affix(const std::string& s, const Value& p, bool prefix, int line) {
  auto one = [&](const Value& v) {
    const std::string& x = need_string(v, prefix ? "startswith()" : "endswith()", line);
    return x.size() <= s.size() && (prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0);
  };
  if (p.is_array()) {
    for (const Value& v : p.array_ref()) {
      if (one(v)) return true;
    }
    return false;
  }
  return one(p);
}
Value attribute_of(const Value& v, const std::string& path) {
  Value cur = v;
  size_t pos = 0;
  for (;;) {
    const size_t dot = path.find('.', pos);
    const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    const Value* next = cur.find(part);
    if (next == nullptr && cur.is_array() && !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit)) {
      const size_t idx = std::stoul(part);
      cur = idx < cur.array_ref().size() ? cur.array_ref()[idx] : Value::undefined(part);
    } else {
      cur = next ? *next : Value::undefined(part);
    }
    if (dot == std::string::npos) return cur;
    pos = dot + 1;
  }
}
std::string join(const Value& seq, const std::string& sep, const Value& attr, int line) {
  std::string out;
  bool first = true;
  for (const Value& v : iterate(seq, line)) {
    if (!first) out += sep;
    first = false;
    out += attr.is_string() ? attribute_of(v, attr.str()).to_output() : v.to_output();
  }
  return out;
}
// select/reject/selectattr/rejectattr: args[0] (or args[1] for *attr) is the test name.
Value select(const Value& seq, CallArgs& a, bool by_attr, bool keep, int line) {
  size_t first_test = by_attr ? 1 : 0;
  std::string attr;
  if (by_attr) attr = need_string(arg(a, 0, "attribute"), "selectattr()", line);
  std::string test;
  if (a.args.size() > first_test) test = need_string(a.args[first_test], "the test name", line);
  if (!test.empty() && !is_test(test)) fail("unsupported test '" + test + "'", line);
  CallArgs rest;
  for (size_t i = first_test + 1; i < a.args.size(); ++i) rest.args.push_back(a.args[i]);
  Array out;
  for (const Value& v : iterate(seq, line)) {
    const Value x = by_attr ? attribute_of(v, attr) : v;
    CallArgs copy = rest;
    const bool ok = test.empty() ? x.truthy() : apply_test(test, x, copy, line);
    if (ok == keep) out.push_back(v);
  }
  return Value::array(std::move(out));
}


bool is_filter(const std::string& name) { return filter_names().count(name) != 0; }
bool is_test(const std::string& name) { return test_names().count(name) != 0; }
bool is_method(const std::string& name) { return method_names().count(name) != 0; }
bool is_global_function(const std::string& name) {
  return name == "raise_exception" || name == "namespace" || name == "range" || name == "dict" ||
         name == "strftime_now";
}

std::vector<std::string> code_points(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    n = std::min(n, s.size() - i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

int64_t length_of(const Value& v, int line) {
  switch (v.kind()) {
    case Value::Kind::kString: return static_cast<int64_t>(code_points(v.str()).size());
    case Value::Kind::kArray: return static_cast<int64_t>(v.array_ref().size());
    case Value::Kind::kObject: return static_cast<int64_t>(v.object_ref().size());
    case Value::Kind::kUndefined: return 0;
    default: fail("length of a " + v.type_name() + " value", line);
  }
}

Array iterate(const Value& v, int line) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kArray: return v.array_ref();
    case Value::Kind::kObject: {
      Array keys;
      for (const auto& [k, x] : v.object_ref()) keys.push_back(Value::string(k));
      return keys;
    }
    case Value::Kind::kString: {
      Array chars;
      for (std::string& cp : code_points(v.str())) chars.push_back(Value::string(std::move(cp)));
      return chars;
    }
    default: fail("cannot iterate over a " + v.type_name() + " value", line);
  }
}

bool contains(const Value& container, const Value& item, int line) {
  if (container.is_string()) {
    return container.str().find(need_string(item, "'in' on a string", line)) != std::string::npos;
  }
  if (container.is_object()) return item.is_string() && container.find(item.str()) != nullptr;
  if (container.is_array()) {
    for (const Value& v : container.array_ref()) {
      if (values_equal(v, item)) return true;
    }
    return false;
  }
  if (container.is_undefined()) fail("'in' on an undefined value", line);
  fail("'in' on a " + container.type_name() + " value", line);
}

int compare_values(const Value& a, const Value& b, int line) {
  if ((a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool())) {
    const double x = a.as_double(), y = b.as_double();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str() ? -1 : a.str() > b.str() ? 1 : 0;
  if (a.is_array() && b.is_array()) {
    const Array &x = a.array_ref(), &y = b.array_ref();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      const int c = compare_values(x[i], y[i], line);
      if (c != 0) return c;
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  fail("cannot order a " + a.type_name() + " and a " + b.type_name(), line);
}

bool apply_test(const std::string& name, const Value& v, CallArgs& a, int line) {
  auto other = [&]() {
    if (a.args.empty()) fail("test '" + name + "' needs an argument", line);
    return a.args[0];
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "mapping") return v.is_object();
  if (name == "iterable") return v.is_array() || v.is_object() || v.is_string();
  if (name == "sequence") return v.is_array() || v.is_object() || v.is_string();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "callable") return v.is_callable();
  if (name == "eq" || name == "equalto") return values_equal(v, other());
  if (name == "ne") return !values_equal(v, other());
  if (name == "sameas") {
    const Value o = other();
    return v.kind() == o.kind() && (v.is_none() || v.is_undefined() || values_equal(v, o));
  }
  if (name == "lt" || name == "lessthan") return compare_values(v, other(), line) < 0;
  if (name == "gt" || name == "greaterthan") return compare_values(v, other(), line) > 0;
  if (name == "le") return compare_values(v, other(), line) <= 0;
  if (name == "ge") return compare_values(v, other(), line) >= 0;
  if (name == "in") return contains(other(), v, line);
  if (name == "odd" || name == "even") {
    const int64_t n = need_int(v, "test '" + name + "'", line);
    return (n % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby") {
    const int64_t d = need_int(other(), "divisibleby", line);
    if (d == 0) fail("divisibleby 0", line);
    return need_int(v, "divisibleby", line) % d == 0;
  }
  if (name == "lower") return v.is_string() && lower(v.str()) == v.str();
  if (name == "upper") return v.is_string() && upper(v.str()) == v.str();
  fail("unsupported test '" + name + "'", line);
}

Value call_method(const Value& obj, const std::string& name, CallArgs& a, int line) {
  if (obj.is_string()) {
    const std::string& s = obj.str();
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      return Value::string(strip(s, arg(a, 0, "chars"), name != "rstrip", name != "lstrip"));
    }
    if (name == "split") {
      const Value maxsplit = arg(a, 1, "maxsplit", Value::integer(-1));
      return split(s, arg(a, 0, "sep"), need_int(maxsplit, "split()", line), line);
    }
    if (name == "startswith" || name == "endswith") {
      if (a.args.empty()) fail(name + "() needs an argument", line);
      return Value::boolean(affix(s, a.args[0], name == "startswith", line));
    }
    if (name == "replace") {
      if (a.args.size() < 2) fail("replace() needs two arguments", line);
      const int64_t count = need_int(arg(a, 2, "count", Value::integer(-1)), "replace()", line);
      return Value::string(replace(s, need_string(a.args[0], "replace()", line),
                                   need_string(a.args[1], "replace()", line), count));
    }
    if (name == "upper") return Value::string(upper(s));
    if (name == "lower") return Value::string(lower(s));
    if (name == "title") return Value::string(title(s));
    if (name == "capitalize") return Value::string(capitalize(s));
    if (name == "find" || name == "count") {
      if (a.args.empty()) fail(name + "() needs an argument", line);
      const std::string& x = need_string(a.args[0], name + "()", line);
      if (name == "find") {
        const size_t hit = s.find(x);
        if (hit == std::string::npos) return Value::integer(-1);
        return Value::integer(static_cast<int64_t>(code_points(s.substr(0, hit)).size()));
      }
      if (x.empty()) return Value::integer(static_cast<int64_t>(code_points(s).size()) + 1);
      int64_t n = 0;
      for (size_t p = s.find(x); p != std::string::npos; p = s.find(x, p + x.size())) ++n;
      return Value::integer(n);
    }
    if (name == "join") {
      if (a.args.empty()) fail("join() needs an argument", line);
      std::string out;
      bool first = true;
      for (const Value& v : iterate(a.args[0], line)) {
        if (!first) out += s;
        first = false;
        out += need_string(v, "str.join()", line);
      }
      return Value::string(out);
    }
  } else if (obj.is_object()) {
    if (name == "get") {
      if (a.args.empty()) fail("get() needs a key", line);
      const Value* v = a.args[0].is_string() ? obj.find(a.args[0].str()) : nullptr;
      return v ? *v : arg(a, 1, "default", Value::none());
    }
    Array out;
    for (const auto& [k, v] : obj.object_ref()) {
      if (name == "items") out.push_back(Value::array({Value::string(k), v}));
      else if (name == "keys") out.push_back(Value::string(k));
      else if (name == "values") out.push_back(v);
      else fail("a dict has no method '" + name + "()'", line);
    }
    return Value::array(std::move(out));
  } else if (obj.is_undefined()) {
    fail("'" + name + "()' called on an undefined value" + (obj.str().empty() ? "" : " ('" + obj.str() + "')"), line);
  }
  fail("a " + obj.type_name() + " value has no method '" + name + "()'", line);
}

Value call_global(const std::string& name, CallArgs& a, int64_t now_unix, int line) {
  if (name == "raise_exception") {
    JinjaError e(a.args.empty() ? std::string("raise_exception() called") : a.args[0].to_output(), line);
    e.raised = true;
    throw e;
  }
  if (name == "namespace" || name == "dict") {
    Value ns = Value::object({}, name == "namespace");
    for (const Value& p : a.args) {
      if (!p.is_object()) fail(name + "() takes keyword arguments or a dict", line);
      for (const auto& [k, v] : p.object_ref()) ns.set(k, v);
    }
    for (auto& [k, v] : a.kwargs) ns.set(k, v);
    return ns;
  }
  if (name == "range") {
    int64_t start = 0, stop = 0, step = 1;
    if (a.args.size() == 1) {
      stop = need_int(a.args[0], "range()", line);
    } else if (a.args.size() == 2 || a.args.size() == 3) {
      start = need_int(a.args[0], "range()", line);
      stop = need_int(a.args[1], "range()", line);
      if (a.args.size() == 3) step = need_int(a.args[2], "range()", line);
    } else {
      fail("range() takes 1 to 3 arguments", line);
    }
    if (step == 0) fail("range() step must not be zero", line);
    const int64_t n = step > 0 ? (stop - start + step - 1) / step : (start - stop - step - 1) / -step;
    if (n > 1000000) fail("range() of more than 1000000 items", line);
    Array out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(Value::integer(i));
    return Value::array(std::move(out));
  }
  if (name == "strftime_now") {
    const std::string fmt = need_string(arg(a, 0, "format"), "strftime_now()", line);
    const std::time_t t = static_cast<std::time_t>(now_unix);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[512];
    const size_t n = fmt.empty() ? 0 : std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
    if (n == 0 && !fmt.empty()) fail("strftime_now(): the format gives an empty or too long text", line);
    return Value::string(std::string(buf, n));
  }
  fail("unsupported function '" + name + "'", line);
}

}  // namespace moe::jinja
