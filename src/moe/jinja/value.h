// Values of the Jinja subset (src/moe/jinja/): what templates compute with. A Value is
// undefined, none, a bool, an int (int64), a float (double), a string (UTF-8 bytes), a
// list, a dict (insertion-ordered, string keys), a callable (a built-in or a macro) or a
// namespace (a dict whose attributes `{% set ns.x = ... %}` may assign).
// Lists, dicts and namespaces are shared by reference (Python semantics); everything else
// is a plain value. Not thread-safe: one render owns its values (a parsed Template is
// immutable and shared).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace moe::jinja {

class Value;
using Array = std::vector<Value>;
using Object = std::vector<std::pair<std::string, Value>>;

// Arguments of a call: positional, then keyword (in call order).
struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
};
using Callable = std::function<Value(CallArgs&)>;

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kArray, kObject, kCallable };

  Value() = default;  // undefined
  static Value undefined(std::string name = "") {
    Value v;
    v.str_ = std::move(name);
    return v;
  }
  static Value none() { return Value(Kind::kNone); }
  static Value boolean(bool b) {
    Value v(Kind::kBool);
    v.int_ = b ? 1 : 0;
    return v;
  }
  static Value integer(int64_t i) {
    Value v(Kind::kInt);
    v.int_ = i;
    return v;
  }
  static Value number(double d) {
    Value v(Kind::kFloat);
    v.float_ = d;
    return v;
  }
  static Value string(std::string s) {
    Value v(Kind::kString);
    v.str_ = std::move(s);
    return v;
  }
  static Value array(Array a = {}) {
    Value v(Kind::kArray);
    v.array_ = std::make_shared<Array>(std::move(a));
    return v;
  }
  static Value object(Object o = {}, bool is_namespace = false) {
    Value v(Kind::kObject);
    v.object_ = std::make_shared<Object>(std::move(o));
    v.namespace_ = is_namespace;
    return v;
  }
  static Value callable(std::string name, Callable fn) {
    Value v(Kind::kCallable);
    v.str_ = std::move(name);
    v.fn_ = std::make_shared<Callable>(std::move(fn));
    return v;
  }
  // JSON -> Value (objects keep their key order; numbers: integers stay ints).
  static Value from_json(const nlohmann::json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_array() const { return kind_ == Kind::kArray; }
  bool is_object() const { return kind_ == Kind::kObject; }
  bool is_namespace() const { return kind_ == Kind::kObject && namespace_; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }
  double as_double() const { return kind_ == Kind::kFloat ? float_ : static_cast<double>(int_); }
  // The string (kString), the callable's name (kCallable) or the undefined name.
  const std::string& str() const { return str_; }
  Array& array_ref() const { return *array_; }
  Object& object_ref() const { return *object_; }
  const Callable& callable_ref() const { return *fn_; }

  // Dict lookup: nullptr when absent (or not a dict).
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value v) const;  // dict only

  // Python truthiness.
  bool truthy() const;
  // What `{{ v }}` prints (Python str(): None, True, 1.5, ['a', 1], {'k': 'v'}).
  std::string to_output() const;
  // Python repr() (strings quoted).
  std::string repr() const;
  // JSON text like Python's json.dumps(ensure_ascii=False): separators ", " and ": ",
  // or with indent >= 0 newlines, "," and ": ". Undefined and callables are errors.
  std::string to_json(int indent = -1) const;
  // A short type name for error messages ("string", "list", ...).
  std::string type_name() const;

 private:
  explicit Value(Kind k) : kind_(k) {}
  void to_json_impl(int indent, int depth, std::string* out) const;

  Kind kind_ = Kind::kUndefined;
  int64_t int_ = 0;
  double float_ = 0;
  bool namespace_ = false;
  std::string str_;
  std::shared_ptr<Array> array_;
  std::shared_ptr<Object> object_;
  std::shared_ptr<Callable> fn_;
};

// Python ==: numbers by value (1 == 1.0, True == 1), strings, lists and dicts deeply.
bool values_equal(const Value& a, const Value& b);
// Python's float repr (shortest round-trip, "2.0", "1e+16", "inf", "nan").
std::string format_float(double d);

}  // namespace moe::jinja
