#include "moe/jinja/evaluator.h"

#include <cmath>

#include "moe/jinja/builtins.h"
#include "moe/jinja/error.h"

namespace moe::jinja {
namespace {

struct Scope {
  Scope* parent = nullptr;
  Object vars;
  Value* find(const std::string& name) {
    for (Scope* s = this; s; s = s->parent) {
      for (auto& [k, v] : s->vars) {
        if (k == name) return &v;
      }
    }
    return nullptr;
  }
  void set(const std::string& name, Value v) {
    for (auto& [k, old] : vars) {
      if (k == name) {
        old = std::move(v);
        return;
      }
    }
    vars.emplace_back(name, std::move(v));
  }
};

enum class Flow { kNormal, kBreak, kContinue };

std::string describe(const Value& v) {
  if (v.is_undefined()) return v.str().empty() ? "an undefined value" : "undefined '" + v.str() + "'";
  return "a " + v.type_name();
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

class Evaluator {
 public:
  Evaluator(const Value& context, const EvalLimits& limits) : context_(context), limits_(limits) {}

  std::string run(const Body& body) {
    std::string out;
    render(body, &global_, &out);
    return out;
  }

 private:
  Flow render(const Body& body, Scope* scope, std::string* out) {
    for (const NodePtr& n : body) {
      const Flow f = render_node(*n, scope, out);
      if (f != Flow::kNormal) return f;
      if (out->size() > limits_.max_output_bytes) {
        fail("the rendered text is longer than " + std::to_string(limits_.max_output_bytes) + " bytes", n->line);
      }
    }
    return Flow::kNormal;
  }

  Flow render_node(const Node& n, Scope* scope, std::string* out) {
    switch (n.kind) {
      case Node::Kind::kText:
        *out += n.text;
        return Flow::kNormal;
      case Node::Kind::kOutput:
        *out += eval(*n.expr, scope).to_output();
        return Flow::kNormal;
      case Node::Kind::kIf:
        for (const auto& [cond, body] : n.branches) {
          if (eval(*cond, scope).truthy()) return render(body, scope, out);
        }
        return render(n.else_body, scope, out);
      case Node::Kind::kFor:
        return render_for(n, scope, out);
      case Node::Kind::kSet:
        assign(n, eval(*n.expr, scope), scope);
        return Flow::kNormal;
      case Node::Kind::kSetBlock: {
        std::string text;
        Scope inner{scope, {}};
        render(n.body, &inner, &text);
        assign(n, Value::string(std::move(text)), scope);
        return Flow::kNormal;
      }
      case Node::Kind::kMacro:
        scope->set(n.text, make_macro(n));
        return Flow::kNormal;
      case Node::Kind::kBreak:
        return Flow::kBreak;
      case Node::Kind::kContinue:
        return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  void bind(const std::vector<std::string>& targets, const Value& v, Scope* scope, int line) {
    if (targets.size() == 1) {
      scope->set(targets[0], v);
      return;
    }
    const Array items = iterate(v, line);
    if (items.size() != targets.size()) {
      fail("cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(targets.size()) + " names",
           line);
    }
    for (size_t i = 0; i < items.size(); ++i) scope->set(targets[i], items[i]);
  }

  void assign(const Node& n, Value v, Scope* scope) {
    if (n.target_object) {
      const Value obj = eval(*n.target_object, scope);
      if (!obj.is_namespace()) {
        fail("cannot set attribute '" + n.targets[0] + "' of " + describe(obj) + " (only of a namespace())", n.line);
      }
      obj.set(n.targets[0], std::move(v));
      return;
    }
    bind(n.targets, v, scope, n.line);
  }

  Flow render_for(const Node& n, Scope* scope, std::string* out) {
    const Value seq = eval(*n.expr, scope);
    Array items = iterate(seq, n.line);
    if (n.filter) {
      Array kept;
      for (const Value& item : items) {
        Scope probe{scope, {}};
        bind(n.targets, item, &probe, n.line);
        if (eval(*n.filter, &probe).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) return render(n.else_body, scope, out);
    const int64_t len = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < len; ++i) {
      if (++iterations_ > limits_.max_iterations) {
        fail("more than " + std::to_string(limits_.max_iterations) + " loop iterations", n.line);
      }
      Scope inner{scope, {}};
      Value loop = Value::object({{"index", Value::integer(i + 1)},
                                  {"index0", Value::integer(i)},
                                  {"revindex", Value::integer(len - i)},
                                  {"revindex0", Value::integer(len - i - 1)},
                                  {"first", Value::boolean(i == 0)},
                                  {"last", Value::boolean(i == len - 1)},
                                  {"length", Value::integer(len)},
                                  {"depth", Value::integer(1)},
                                  {"depth0", Value::integer(0)}});
      if (i > 0) loop.set("previtem", items[static_cast<size_t>(i - 1)]);
      if (i + 1 < len) loop.set("nextitem", items[static_cast<size_t>(i + 1)]);
      inner.set("loop", loop);
      bind(n.targets, items[static_cast<size_t>(i)], &inner, n.line);
      if (render(n.body, &inner, out) == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  Value make_macro(const Node& n) {
    const Node* node = &n;
    return Value::callable(n.text, [this, node](CallArgs& a) -> Value {
      if (++macro_depth_ > limits_.max_macro_depth) {
        fail("macro '" + node->text + "' nested deeper than " + std::to_string(limits_.max_macro_depth), node->line);
      }
      if (a.args.size() > node->params.size()) {
        fail("macro '" + node->text + "' takes " + std::to_string(node->params.size()) + " arguments, got " +
                 std::to_string(a.args.size()),
             node->line);
      }
      Scope s{&global_, {}};
      for (size_t i = 0; i < node->params.size(); ++i) {
        Value v = i < a.args.size() ? a.args[i] : Value::undefined(node->params[i]);
        for (auto& [k, kv] : a.kwargs) {
          if (k == node->params[i]) v = kv;
        }
        if (v.is_undefined() && i >= a.args.size() && node->defaults[i]) v = eval(*node->defaults[i], &s);
        s.set(node->params[i], v);
      }
      for (auto& [k, kv] : a.kwargs) {
        if (std::find(node->params.begin(), node->params.end(), k) == node->params.end()) {
          fail("macro '" + node->text + "' has no parameter '" + k + "'", node->line);
        }
      }
      std::string text;
      render(node->body, &s, &text);
      --macro_depth_;
      return Value::string(std::move(text));
    });
  }

  Value lookup(const std::string& name, Scope* scope) {
    if (Value* v = scope->find(name)) return *v;
    if (const Value* v = context_.find(name)) return *v;
    return Value::undefined(name);
  }

  CallArgs eval_args(const Expr& e, Scope* scope) {
    CallArgs a;
    for (size_t i = 1; i <= e.npos; ++i) a.args.push_back(eval(*e.c[i], scope));
    for (size_t i = 0; i < e.kwnames.size(); ++i) a.kwargs.emplace_back(e.kwnames[i], eval(*e.c[1 + e.npos + i], scope));
    return a;
  }

  Value call(const Expr& e, Scope* scope) {
    const Expr& callee = *e.c[0];
    if (callee.kind == Expr::Kind::kGetAttr) {
      const Value obj = eval(*callee.c[0], scope);
      CallArgs a = eval_args(e, scope);
      return call_method(obj, callee.name, a, e.line);
    }
    Value fn;
    if (callee.kind == Expr::Kind::kName) {
      fn = lookup(callee.name, scope);
      if (fn.is_undefined() && is_global_function(callee.name)) {
        CallArgs a = eval_args(e, scope);
        return call_global(callee.name, a, limits_.now_unix, e.line);
      }
    } else {
      fn = eval(callee, scope);
    }
    if (!fn.is_callable()) fail("cannot call " + describe(fn), e.line);
    CallArgs a = eval_args(e, scope);
    return fn.callable_ref()(a);
  }

  Value get_item(const Value& obj, const Value& key, int line) {
    if (obj.is_undefined()) fail("subscript of " + describe(obj), line);
    if (obj.is_object()) {
      const Value* v = key.is_string() ? obj.find(key.str()) : nullptr;
      return v ? *v : Value::undefined(key.to_output());
    }
    if ((obj.is_array() || obj.is_string()) && (key.is_int() || key.is_bool())) {
      if (obj.is_array()) {
        const Array& a = obj.array_ref();
        int64_t i = key.as_int();
        if (i < 0) i += static_cast<int64_t>(a.size());
        return i >= 0 && i < static_cast<int64_t>(a.size()) ? a[static_cast<size_t>(i)] : Value::undefined();
      }
      const std::vector<std::string> cps = code_points(obj.str());
      int64_t i = key.as_int();
      if (i < 0) i += static_cast<int64_t>(cps.size());
      return i >= 0 && i < static_cast<int64_t>(cps.size()) ? Value::string(cps[static_cast<size_t>(i)]) : Value::undefined();
    }
    return Value::undefined(key.to_output());
  }

  Value slice(const Expr& e, Scope* scope) {
    const Value obj = eval(*e.c[0], scope);
    if (!obj.is_array() && !obj.is_string()) fail("slice of " + describe(obj), e.line);
    Array items = obj.is_array() ? obj.array_ref() : iterate(obj, e.line);
    const int64_t n = static_cast<int64_t>(items.size());
    auto part = [&](int k, bool* given) -> int64_t {
      *given = false;
      if (!e.c[k]) return 0;
      const Value v = eval(*e.c[k], scope);
      if (v.is_none()) return 0;
      if (!v.is_int()) fail("slice indices must be integers, got " + describe(v), e.line);
      *given = true;
      return v.as_int();
    };
    bool has_start, has_stop, has_step;
    int64_t start = part(1, &has_start), stop = part(2, &has_stop), step = part(3, &has_step);
    if (!has_step) step = 1;
    if (step == 0) fail("slice step cannot be zero", e.line);
    auto clamp = [&](int64_t i, bool given, int64_t dflt) {
      if (!given) return dflt;
      if (i < 0) i += n;
      if (step > 0) return std::min(std::max<int64_t>(i, 0), n);
      return std::min(std::max<int64_t>(i, -1), n - 1);
    };
    start = clamp(start, has_start, step > 0 ? 0 : n - 1);
    stop = clamp(stop, has_stop, step > 0 ? n : -1);
    Array out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(items[static_cast<size_t>(i)]);
    if (obj.is_array()) return Value::array(std::move(out));
    std::string s;
    for (const Value& v : out) s += v.str();
    return Value::string(s);
  }

  Value arithmetic(const std::string& op, const Value& l, const Value& r, int line) {
    if (op == "~") return Value::string(l.to_output() + r.to_output());
    if (l.is_undefined() || r.is_undefined()) {
      fail("'" + op + "' on " + describe(l.is_undefined() ? l : r), line);
    }
    const bool ln = l.is_number() || l.is_bool(), rn = r.is_number() || r.is_bool();
    if (op == "+") {
      if (l.is_string() && r.is_string()) return Value::string(l.str() + r.str());
      if (l.is_array() && r.is_array()) {
        Array a = l.array_ref();
        a.insert(a.end(), r.array_ref().begin(), r.array_ref().end());
        return Value::array(std::move(a));
      }
    }
    if (op == "*" && (l.is_string() || l.is_array()) && (r.is_int() || r.is_bool())) {
      const int64_t times = r.as_int();
      if (times * length_of(l, line) > 10'000'000) fail("'*' result too long", line);
      if (l.is_string()) {
        std::string s;
        for (int64_t i = 0; i < times; ++i) s += l.str();
        return Value::string(s);
      }
      Array a;
      for (int64_t i = 0; i < times; ++i) a.insert(a.end(), l.array_ref().begin(), l.array_ref().end());
      return Value::array(std::move(a));
    }
    if (!ln || !rn) fail("unsupported operand types for " + op + ": " + l.type_name() + " and " + r.type_name(), line);
    const bool ints = !l.is_float() && !r.is_float();
    const double x = l.as_double(), y = r.as_double();
    if (op == "+") return ints ? Value::integer(l.as_int() + r.as_int()) : Value::number(x + y);
    if (op == "-") return ints ? Value::integer(l.as_int() - r.as_int()) : Value::number(x - y);
    if (op == "*") return ints ? Value::integer(l.as_int() * r.as_int()) : Value::number(x * y);
    if ((op == "/" || op == "//" || op == "%") && y == 0) fail("division by zero", line);
    if (op == "/") return Value::number(x / y);
    if (op == "//") return ints ? Value::integer(floor_div(l.as_int(), r.as_int())) : Value::number(std::floor(x / y));
    if (op == "%") {
      if (ints) return Value::integer(l.as_int() - floor_div(l.as_int(), r.as_int()) * r.as_int());
      return Value::number(x - std::floor(x / y) * y);
    }
    if (op == "**") {
      if (ints && r.as_int() >= 0) return Value::integer(static_cast<int64_t>(std::pow(x, y)));
      return Value::number(std::pow(x, y));
    }
    fail("unsupported operator '" + op + "'", line);
  }

  Value binary(const Expr& e, Scope* scope) {
    const Value l = eval(*e.c[0], scope), r = eval(*e.c[1], scope);
    const std::string& op = e.name;
    if (op == "==") return Value::boolean(values_equal(l, r));
    if (op == "!=") return Value::boolean(!values_equal(l, r));
    if (op == "<") return Value::boolean(compare_values(l, r, e.line) < 0);
    if (op == ">") return Value::boolean(compare_values(l, r, e.line) > 0);
    if (op == "<=") return Value::boolean(compare_values(l, r, e.line) <= 0);
    if (op == ">=") return Value::boolean(compare_values(l, r, e.line) >= 0);
    if (op == "in") return Value::boolean(contains(r, l, e.line));
    if (op == "not in") return Value::boolean(!contains(r, l, e.line));
    return arithmetic(op, l, r, e.line);
  }

  Value eval(const Expr& e, Scope* scope) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.value;
      case Expr::Kind::kName:
        return lookup(e.name, scope);
      case Expr::Kind::kGetAttr: {
        const Value obj = eval(*e.c[0], scope);
        if (obj.is_undefined()) fail("attribute '" + e.name + "' of " + describe(obj), e.line);
        const Value* v = obj.find(e.name);
        return v ? *v : Value::undefined(e.name);
      }
      case Expr::Kind::kGetItem:
        return get_item(eval(*e.c[0], scope), eval(*e.c[1], scope), e.line);
      case Expr::Kind::kSlice:
        return slice(e, scope);
      case Expr::Kind::kCall:
        return call(e, scope);
      case Expr::Kind::kFilter: {
        const Value input = eval(*e.c[0], scope);
        CallArgs a = eval_args(e, scope);
        try {
          return apply_filter(e.name, input, a, e.line);
        } catch (JinjaError& err) {
          if (err.line == 0) err.line = e.line;  // raised below without a position (e.g. tojson)
          throw;
        }
      }
      case Expr::Kind::kTest: {
        const Value input = eval(*e.c[0], scope);
        CallArgs a = eval_args(e, scope);
        return Value::boolean(apply_test(e.name, input, a, e.line) != e.negated);
      }
      case Expr::Kind::kUnary: {
        const Value v = eval(*e.c[0], scope);
        if (e.name == "not") return Value::boolean(!v.truthy());
        if (v.is_int() || v.is_bool()) return Value::integer(e.name == "-" ? -v.as_int() : v.as_int());
        if (v.is_float()) return Value::number(e.name == "-" ? -v.as_double() : v.as_double());
        fail("unary '" + e.name + "' on " + describe(v), e.line);
      }
      case Expr::Kind::kBinary:
        return binary(e, scope);
      case Expr::Kind::kAnd: {
        Value l = eval(*e.c[0], scope);
        return l.truthy() ? eval(*e.c[1], scope) : l;
      }
      case Expr::Kind::kOr: {
        Value l = eval(*e.c[0], scope);
        return l.truthy() ? l : eval(*e.c[1], scope);
      }
      case Expr::Kind::kCond:
        if (eval(*e.c[1], scope).truthy()) return eval(*e.c[0], scope);
        return e.c[2] ? eval(*e.c[2], scope) : Value::undefined();
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        Array a;
        for (const ExprPtr& x : e.c) a.push_back(eval(*x, scope));
        return Value::array(std::move(a));
      }
      case Expr::Kind::kDict: {
        Value d = Value::object();
        for (size_t i = 0; i + 1 < e.c.size(); i += 2) {
          const Value k = eval(*e.c[i], scope);
          if (!k.is_string()) fail("dict keys must be strings, got " + describe(k), e.line);
          d.set(k.str(), eval(*e.c[i + 1], scope));
        }
        return d;
      }
    }
    fail("bad expression", e.line);
  }

  const Value& context_;
  const EvalLimits& limits_;
  Scope global_;
  int64_t iterations_ = 0;
  int macro_depth_ = 0;
};

}  // namespace

std::string evaluate(const Body& body, const Value& context, const EvalLimits& limits) {
  Evaluator ev(context, limits);
  return ev.run(body);
}

}  // namespace moe::jinja
