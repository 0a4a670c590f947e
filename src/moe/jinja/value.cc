#include "moe/jinja/value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "moe/jinja/error.h"

namespace moe::jinja {

Value Value::from_json(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return none();
    case nlohmann::json::value_t::boolean:
      return boolean(j.get<bool>());
    case nlohmann::json::value_t::number_integer:
      return integer(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      return integer(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::json::value_t::number_float:
      return number(j.get<double>());
    case nlohmann::json::value_t::string:
      return string(j.get<std::string>());
    case nlohmann::json::value_t::array: {
      Array a;
      for (const auto& e : j) a.push_back(from_json(e));
      return array(std::move(a));
    }
    case nlohmann::json::value_t::object: {
      Object o;
      for (const auto& [k, v] : j.items()) o.emplace_back(k, from_json(v));
      return object(std::move(o));
    }
    default:
      return undefined();
  }
}

const Value* Value::find(const std::string& key) const {
  if (kind_ != Kind::kObject) return nullptr;
  for (const auto& [k, v] : *object_) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Value::set(const std::string& key, Value v) const {
  for (auto& [k, old] : *object_) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  object_->emplace_back(key, std::move(v));
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
    case Kind::kInt:
      return int_ != 0;
    case Kind::kFloat:
      return float_ != 0;
    case Kind::kString:
      return !str_.empty();
    case Kind::kArray:
      return !array_->empty();
    case Kind::kObject:
      return !object_->empty();
    case Kind::kCallable:
      return true;
  }
  return false;
}

std::string format_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d);
  std::string s(buf, end);
  // Python repr switches to exponent notation at 1e16 and below 1e-4.
  const double a = std::fabs(d);
  if (a != 0 && (a >= 1e16 || a < 1e-4)) {
    auto [e2, ec2] = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
    s.assign(buf, e2);
    // "1e+16" like Python: mantissa without trailing ".0", exponent with at least 2 digits.
    const size_t e = s.find('e');
    std::string mant = s.substr(0, e), exp = s.substr(e + 1);
    const char sign = exp[0] == '-' ? '-' : '+';
    if (exp[0] == '-' || exp[0] == '+') exp = exp.substr(1);
    while (exp.size() > 2 && exp[0] == '0') exp = exp.substr(1);
    if (exp.size() < 2) exp = "0" + exp;
    return mant + "e" + sign + exp;
  }
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

namespace {

std::string quote_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  const char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<unsigned char>(q)) out += std::string("\\") + q;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + q;
}

void json_string(const std::string& s, std::string* out) {
  *out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          *out += buf;
        } else {
          *out += static_cast<char>(c);
        }
    }
  }
  *out += '"';
}

}  // namespace

std::string Value::repr() const {
  if (kind_ == Kind::kString) return quote_repr(str_);
  return to_output();
}

std::string Value::to_output() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return int_ ? "True" : "False";
    case Kind::kInt:
      return std::to_string(int_);
    case Kind::kFloat:
      return format_float(float_);
    case Kind::kString:
      return str_;
    case Kind::kArray: {
      std::string out = "[";
      for (size_t i = 0; i < array_->size(); ++i) out += (i ? ", " : "") + (*array_)[i].repr();
      return out + "]";
    }
    case Kind::kObject: {
      std::string out = namespace_ ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, v] : *object_) {
        out += (first ? "" : ", ") + quote_repr(k) + ": " + v.repr();
        first = false;
      }
      return out + (namespace_ ? "}>" : "}");
    }
    case Kind::kCallable:
      return "<function " + str_ + ">";
  }
  return "";
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined: return "undefined";
    case Kind::kNone: return "none";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "string";
    case Kind::kArray: return "list";
    case Kind::kObject: return namespace_ ? "namespace" : "dict";
    case Kind::kCallable: return "function";
  }
  return "?";
}

std::string Value::to_json(int indent) const {
  std::string out;
  to_json_impl(indent, 0, &out);
  return out;
}

void Value::to_json_impl(int indent, int depth, std::string* out) const {
  auto newline = [&](int d) {
    if (indent < 0) return;
    *out += '\n';
    out->append(static_cast<size_t>(indent) * static_cast<size_t>(d), ' ');
  };
  const char* item_sep = indent < 0 ? ", " : ",";
  switch (kind_) {
    case Kind::kUndefined:
      fail("tojson: cannot serialise an undefined value" + (str_.empty() ? "" : " ('" + str_ + "')"));
    case Kind::kCallable:
      fail("tojson: cannot serialise a function");
    case Kind::kNone:
      *out += "null";
      return;
    case Kind::kBool:
      *out += int_ ? "true" : "false";
      return;
    case Kind::kInt:
      *out += std::to_string(int_);
      return;
    case Kind::kFloat:
      *out += std::isnan(float_) ? "NaN" : std::isinf(float_) ? (float_ > 0 ? "Infinity" : "-Infinity") : format_float(float_);
      return;
    case Kind::kString:
      json_string(str_, out);
      return;
    case Kind::kArray:
      if (array_->empty()) {
        *out += "[]";
        return;
      }
      *out += '[';
      for (size_t i = 0; i < array_->size(); ++i) {
        if (i) *out += item_sep;
        newline(depth + 1);
        (*array_)[i].to_json_impl(indent, depth + 1, out);
      }
      newline(depth);
      *out += ']';
      return;
    case Kind::kObject: {
      if (object_->empty()) {
        *out += "{}";
        return;
      }
      *out += '{';
      bool first = true;
      for (const auto& [k, v] : *object_) {
        if (!first) *out += item_sep;
        first = false;
        newline(depth + 1);
        json_string(k, out);
        *out += ": ";
        v.to_json_impl(indent, depth + 1, out);
      }
      newline(depth);
      *out += '}';
      return;
    }
  }
}

bool values_equal(const Value& a, const Value& b) {
  const bool an = a.is_number() || a.is_bool(), bn = b.is_number() || b.is_bool();
  if (an && bn) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.str() == b.str();
    case Value::Kind::kArray: {
      const Array &x = a.array_ref(), &y = b.array_ref();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!values_equal(x[i], y[i])) return false;
      }
      return true;
    }
    case Value::Kind::kObject: {
      const Object &x = a.object_ref(), &y = b.object_ref();
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x) {
        const Value* w = b.find(k);
        if (w == nullptr || !values_equal(v, *w)) return false;
      }
      return true;
    }
    case Value::Kind::kCallable:
      return &a.callable_ref() == &b.callable_ref();
    default:
      return false;
  }
}

}  // namespace moe::jinja
