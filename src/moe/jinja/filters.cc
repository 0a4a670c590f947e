// The filters of builtins.h (apply_filter).
#include <algorithm>
#include <cmath>

#include "moe/jinja/builtins.h"
#include "moe/jinja/error.h"

namespace moe::jinja {
namespace {

Value to_list(const Value& v, int line) { return Value::array(iterate(v, line)); }

Value first_or_last(const Value& v, bool first, int line) {
  Array items = iterate(v, line);
  if (items.empty()) return Value::undefined(first ? "first" : "last");
  return first ? items.front() : items.back();
}

Value min_max(const Value& v, bool want_max, int line) {
  Array items = iterate(v, line);
  if (items.empty()) return Value::undefined(want_max ? "max" : "min");
  Value best = items[0];
  for (const Value& x : items) {
    const int c = compare_values(x, best, line);
    if (want_max ? c > 0 : c < 0) best = x;
  }
  return best;
}

Value to_int(const Value& v, const Value& fallback) {
  if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
  if (v.is_float()) return Value::integer(static_cast<int64_t>(std::trunc(v.as_double())));
  if (v.is_string()) {
    try {
      size_t used = 0;
      const std::string s = strip(v.str(), Value::none(), true, true);
      const long long i = std::stoll(s, &used);
      if (used == s.size()) return Value::integer(i);
      const double d = std::stod(s, &used);
      if (used == s.size()) return Value::integer(static_cast<int64_t>(std::trunc(d)));
    } catch (const std::exception&) {  // not a number: the default
    }
  }
  return fallback;
}

Value to_float(const Value& v, const Value& fallback) {
  if (v.is_number() || v.is_bool()) return Value::number(v.as_double());
  if (v.is_string()) {
    try {
      size_t used = 0;
      const std::string s = strip(v.str(), Value::none(), true, true);
      const double d = std::stod(s, &used);
      if (used == s.size()) return Value::number(d);
    } catch (const std::exception&) {  // not a number: the default
    }
  }
  return fallback;
}

std::string indent(const std::string& s, const std::string& pad, bool first, bool blank) {
  std::string out;
  size_t pos = 0;
  bool is_first = true;
  for (;;) {
    const size_t nl = s.find('\n', pos);
    const std::string line = s.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    const bool add = (is_first ? first : true) && (blank || !line.empty());
    out += (add ? pad : "") + line;
    if (nl == std::string::npos) break;
    out += '\n';
    pos = nl + 1;
    is_first = false;
  }
  return out;
}

}  // namespace

Value apply_filter(const std::string& name, const Value& v, CallArgs& a, int line) {
  if (name == "safe") return v;
  if (name == "trim") {
    return Value::string(strip(need_string(v, "trim", line), arg(a, 0, "chars"), true, true));
  }
  if (name == "length" || name == "count") return Value::integer(length_of(v, line));
  if (name == "tojson") {
    const Value ind = arg(a, 0, "indent", Value::none());
    return Value::string(v.to_json(ind.is_none() ? -1 : static_cast<int>(need_int(ind, "tojson indent", line))));
  }
  if (name == "string") return Value::string(v.to_output());
  if (name == "upper") return Value::string(upper(v.to_output()));
  if (name == "lower") return Value::string(lower(v.to_output()));
  if (name == "capitalize") return Value::string(capitalize(v.to_output()));
  if (name == "title") {
    // Jinja's title: every word (after whitespace, -, brackets) capitalised.
    std::string s = v.to_output(), out;
    bool start = true;
    for (char c : s) {
      const bool sep = std::string(" \t\n\r\f\v-([{<").find(c) != std::string::npos;
      out += sep ? c : static_cast<char>(start ? std::toupper(static_cast<unsigned char>(c))
                                               : std::tolower(static_cast<unsigned char>(c)));
      start = sep;
    }
    return Value::string(out);
  }
  if (name == "join") {
    const Value sep = arg(a, 0, "d", Value::string(""));
    return Value::string(join(v, need_string(sep, "join", line), arg(a, 1, "attribute"), line));
  }
  if (name == "default" || name == "d") {
    const bool boolean = arg(a, 1, "boolean", Value::boolean(false)).truthy();
    const bool use_default = boolean ? !v.truthy() : v.is_undefined();
    return use_default ? arg(a, 0, "default_value", Value::string("")) : v;
  }
  if (name == "first" || name == "last") return first_or_last(v, name == "first", line);
  if (name == "items") {
    if (v.is_undefined()) return Value::array();
    if (!v.is_object()) fail("items needs a dict, got " + v.type_name(), line);
    Array out;
    for (const auto& [k, x] : v.object_ref()) out.push_back(Value::array({Value::string(k), x}));
    return Value::array(std::move(out));
  }
  if (name == "int") return to_int(v, arg(a, 0, "default", Value::integer(0)));
  if (name == "float") return to_float(v, arg(a, 0, "default", Value::number(0)));
  if (name == "abs") {
    if (v.is_int()) return Value::integer(v.as_int() < 0 ? -v.as_int() : v.as_int());
    if (v.is_float()) return Value::number(std::fabs(v.as_double()));
    fail("abs needs a number, got " + v.type_name(), line);
  }
  if (name == "round") {
    const int64_t precision = need_int(arg(a, 0, "precision", Value::integer(0)), "round", line);
    const std::string method = need_string(arg(a, 1, "method", Value::string("common")), "round", line);
    if (!v.is_number()) fail("round needs a number, got " + v.type_name(), line);
    const double scale = std::pow(10.0, static_cast<double>(precision)), x = v.as_double() * scale;
    const double r = method == "floor" ? std::floor(x) : method == "ceil" ? std::ceil(x) : std::round(x);
    return Value::number(r / scale);
  }
  if (name == "replace") {
    if (a.args.size() < 2) fail("replace needs two arguments", line);
    const int64_t count = need_int(arg(a, 2, "count", Value::integer(-1)), "replace", line);
    return Value::string(replace(v.to_output(), need_string(a.args[0], "replace", line),
                                 need_string(a.args[1], "replace", line), count));
  }
  if (name == "list") return to_list(v, line);
  if (name == "reverse") {
    if (v.is_string()) {
      std::vector<std::string> cps = code_points(v.str());
      std::reverse(cps.begin(), cps.end());
      std::string out;
      for (const std::string& cp : cps) out += cp;
      return Value::string(out);
    }
    Array items = iterate(v, line);
    std::reverse(items.begin(), items.end());
    return Value::array(std::move(items));
  }
  if (name == "unique") {
    Array out;
    for (const Value& x : iterate(v, line)) {
      if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return values_equal(x, y); })) out.push_back(x);
    }
    return Value::array(std::move(out));
  }
  if (name == "sort") {
    const bool reverse = arg(a, 0, "reverse", Value::boolean(false)).truthy();
    const Value attr = arg(a, 2, "attribute");
    Array items = iterate(v, line);
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
      const Value xa = attr.is_string() ? attribute_of(x, attr.str()) : x;
      const Value ya = attr.is_string() ? attribute_of(y, attr.str()) : y;
      const int c = compare_values(xa, ya, line);
      return reverse ? c > 0 : c < 0;
    });
    return Value::array(std::move(items));
  }
  if (name == "sum") {
    const Value attr = arg(a, 0, "attribute");
    Value total = arg(a, 1, "start", Value::integer(0));
    for (const Value& x : iterate(v, line)) {
      const Value y = attr.is_string() ? attribute_of(x, attr.str()) : x;
      if (!y.is_number() || !total.is_number()) fail("sum needs numbers, got " + y.type_name(), line);
      total = total.is_int() && y.is_int() ? Value::integer(total.as_int() + y.as_int())
                                           : Value::number(total.as_double() + y.as_double());
    }
    return total;
  }
  if (name == "min" || name == "max") return min_max(v, name == "max", line);
  if (name == "indent") {
    const Value width = arg(a, 0, "width", Value::integer(4));
    const std::string pad = width.is_string() ? width.str() : std::string(static_cast<size_t>(std::max<int64_t>(0, need_int(width, "indent", line))), ' ');
    return Value::string(indent(v.to_output(), pad, arg(a, 1, "first", Value::boolean(false)).truthy(),
                                arg(a, 2, "blank", Value::boolean(false)).truthy()));
  }
  if (name == "map") {
    Array out;
    const Value attr = arg(a, 99, "attribute");
    if (attr.is_string()) {
      const Value dflt = arg(a, 99, "default");
      for (const Value& x : iterate(v, line)) {
        Value y = attribute_of(x, attr.str());
        out.push_back(y.is_undefined() && !dflt.is_undefined() ? dflt : y);
      }
      return Value::array(std::move(out));
    }
    if (a.args.empty()) fail("map needs a filter name or attribute=", line);
    const std::string& filter = need_string(a.args[0], "map", line);
    if (!is_filter(filter) || filter == "map") fail("unsupported filter '" + filter + "' in map", line);
    CallArgs rest;
    rest.args.assign(a.args.begin() + 1, a.args.end());
    rest.kwargs = a.kwargs;
    for (const Value& x : iterate(v, line)) {
      CallArgs copy = rest;
      out.push_back(apply_filter(filter, x, copy, line));
    }
    return Value::array(std::move(out));
  }
  if (name == "select" || name == "reject") return select(v, a, false, name == "select", line);
  if (name == "selectattr" || name == "rejectattr") return select(v, a, true, name == "selectattr", line);
  fail("unsupported filter '" + name + "'", line);
}

}  // namespace moe::jinja
