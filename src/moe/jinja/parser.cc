#include "moe/jinja/parser.h"

#include <set>
#include <utility>

#include "moe/jinja/builtins.h"
#include "moe/jinja/error.h"

namespace moe::jinja {
namespace {

using T = Token::Type;

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : toks_(tokens) {}

  Body parse_all() {
    Body body = parse_body({});
    if (peek().type != T::kEof) fail("unexpected tag", peek().line);
    for (const auto& [name, line] : called_names_) {
      if (!is_global_function(name) && macros_.count(name) == 0) {
        fail("unsupported function '" + name + "' (not a built-in or a macro of this template)", line);
      }
    }
    return body;
  }

 private:
  const Token& peek(size_t k = 0) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  const Token& next() {
    const Token& t = toks_[pos_];
    if (pos_ + 1 < toks_.size()) ++pos_;
    return t;
  }
  bool is_op(const char* op, size_t k = 0) const { return peek(k).type == T::kOp && peek(k).text == op; }
  bool is_name(const char* n, size_t k = 0) const { return peek(k).type == T::kName && peek(k).text == n; }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(std::string("expected '") + op + "'" + found(), peek().line);
    next();
  }
  std::string found() const {
    const Token& t = peek();
    switch (t.type) {
      case T::kTagEnd: return " before the end of the tag";
      case T::kEof: return " before the end of the template";
      case T::kName: case T::kOp: return ", found '" + t.text + "'";
      case T::kString: return ", found a string";
      case T::kInt: case T::kFloat: return ", found a number";
      default: return "";
    }
  }
  std::string expect_name() {
    if (peek().type != T::kName) fail("expected a name" + found(), peek().line);
    return next().text;
  }
  void expect_tag_end() {
    if (peek().type != T::kTagEnd) fail("expected the end of the tag" + found(), peek().line);
    next();
  }

  // Statements until one of `ends` ({% name %}); leaves the position at that tag's start.
  Body parse_body(const std::set<std::string>& ends) {
    Body body;
    for (;;) {
      const Token& t = peek();
      if (t.type == T::kEof) {
        if (!ends.empty()) {
          std::string closing = *ends.begin();
          for (const std::string& e : ends) {
            if (e.rfind("end", 0) == 0) closing = e;
          }
          fail("missing {% " + closing + " %} before the end of the template", t.line);
        }
        return body;
      }
      if (t.type == T::kText) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kText;
        n->line = t.line;
        n->text = next().text;
        body.push_back(std::move(n));
      } else if (t.type == T::kExprStart) {
        next();
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kOutput;
        n->line = t.line;
        n->expr = parse_expr();
        expect_tag_end();
        body.push_back(std::move(n));
      } else if (t.type == T::kStmtStart) {
        const Token& kw = peek(1);
        if (kw.type != T::kName) fail("expected a tag name after {%", kw.line);
        if (ends.count(kw.text)) return body;
        next();
        body.push_back(parse_statement());
      } else {
        fail("unexpected token", t.line);
      }
    }
  }

  NodePtr parse_statement() {
    const Token& kw = next();
    const int line = kw.line;
    auto n = std::make_unique<Node>();
    n->line = line;
    const std::string& name = kw.text;
    if (name == "if") {
      n->kind = Node::Kind::kIf;
      ExprPtr cond = parse_expr();
      expect_tag_end();
      for (;;) {
        Body b = parse_body({"elif", "else", "endif"});
        n->branches.emplace_back(std::move(cond), std::move(b));
        next();  // {%
        const std::string which = next().text;
        if (which == "elif") {
          cond = parse_expr();
          expect_tag_end();
          continue;
        }
        expect_tag_end();
        if (which == "else") {
          n->else_body = parse_body({"endif"});
          next();
          next();
          expect_tag_end();
        }
        break;
      }
    } else if (name == "for") {
      n->kind = Node::Kind::kFor;
      n->targets.push_back(expect_name());
      while (is_op(",")) {
        next();
        n->targets.push_back(expect_name());
      }
      if (!is_name("in")) fail("expected 'in' in a for tag" + found(), peek().line);
      next();
      n->expr = parse_expr(/*allow_cond=*/false);
      if (is_name("if")) {
        next();
        n->filter = parse_expr();
      }
      if (is_name("recursive")) fail("unsupported: recursive for loops", peek().line);
      expect_tag_end();
      ++loop_depth_;
      n->body = parse_body({"else", "endfor"});
      --loop_depth_;
      next();
      if (next().text == "else") {
        expect_tag_end();
        n->else_body = parse_body({"endfor"});
        next();
        next();
      }
      expect_tag_end();
    } else if (name == "set") {
      std::string first = expect_name();
      if (is_op(".")) {
        next();
        auto obj = std::make_unique<Expr>();
        obj->kind = Expr::Kind::kName;
        obj->name = first;
        obj->line = line;
        n->target_object = std::move(obj);
        n->targets.push_back(expect_name());
      } else {
        n->targets.push_back(first);
        while (is_op(",")) {
          next();
          n->targets.push_back(expect_name());
        }
      }
      if (is_op("=")) {
        next();
        n->kind = Node::Kind::kSet;
        n->expr = parse_tuple_or_expr();
        expect_tag_end();
      } else {
        if (n->targets.size() != 1) fail("a block set takes one name", line);
        expect_tag_end();
        n->kind = Node::Kind::kSetBlock;
        n->body = parse_body({"endset"});
        next();
        next();
        expect_tag_end();
      }
    } else if (name == "macro") {
      n->kind = Node::Kind::kMacro;
      n->text = expect_name();
      macros_.insert(n->text);
      expect_op("(");
      while (!is_op(")")) {
        n->params.push_back(expect_name());
        if (is_op("=")) {
          next();
          n->defaults.push_back(parse_expr());
        } else {
          n->defaults.push_back(nullptr);
        }
        if (!is_op(",")) break;
        next();
      }
      expect_op(")");
      expect_tag_end();
      const int saved = loop_depth_;
      loop_depth_ = 0;
      n->body = parse_body({"endmacro"});
      loop_depth_ = saved;
      next();
      next();
      expect_tag_end();
    } else if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) fail("'" + name + "' outside a for loop", line);
      n->kind = name == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
      expect_tag_end();
    } else if (name == "elif" || name == "else" || name.rfind("end", 0) == 0) {
      fail("unexpected {% " + name + " %} (no open block it closes)", line);
    } else {
      fail("unsupported tag '" + name + "'", line);
    }
    return n;
  }

  ExprPtr make(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // `a, b` (a tuple without parentheses) as in {% set x = a, b %}.
  ExprPtr parse_tuple_or_expr() {
    ExprPtr first = parse_expr();
    if (!is_op(",")) return first;
    auto t = make(Expr::Kind::kTuple, first->line);
    t->c.push_back(std::move(first));
    while (is_op(",")) {
      next();
      t->c.push_back(parse_expr());
    }
    return t;
  }

  ExprPtr parse_expr(bool allow_cond = true) {
    ExprPtr e = parse_or();
    if (allow_cond && is_name("if")) {
      const int line = next().line;
      auto c = make(Expr::Kind::kCond, line);
      c->c.push_back(std::move(e));
      c->c.push_back(parse_or());
      if (is_name("else")) {
        next();
        c->c.push_back(parse_expr());
      } else {
        c->c.push_back(nullptr);
      }
      return c;
    }
    return e;
  }
  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      auto o = make(Expr::Kind::kOr, next().line);
      o->c.push_back(std::move(e));
      o->c.push_back(parse_and());
      e = std::move(o);
    }
    return e;
  }
  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      auto o = make(Expr::Kind::kAnd, next().line);
      o->c.push_back(std::move(e));
      o->c.push_back(parse_not());
      e = std::move(o);
    }
    return e;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      auto u = make(Expr::Kind::kUnary, next().line);
      u->name = "not";
      u->c.push_back(parse_not());
      return u;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    ExprPtr e = parse_math1();
    for (;;) {
      std::string op;
      if (peek().type == T::kOp && (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
                                    peek().text == ">" || peek().text == "<=" || peek().text == ">=")) {
        op = peek().text;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && is_name("in", 1)) {
        op = "not in";
        next();
        next();
      } else {
        return e;
      }
      auto b = make(Expr::Kind::kBinary, e->line);
      b->name = op;
      b->c.push_back(std::move(e));
      b->c.push_back(parse_math1());
      e = std::move(b);
    }
  }
  ExprPtr binary(ExprPtr l, const std::string& op, ExprPtr r) {
    auto b = make(Expr::Kind::kBinary, l->line);
    b->name = op;
    b->c.push_back(std::move(l));
    b->c.push_back(std::move(r));
    return b;
  }
  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const std::string op = next().text;
      e = binary(std::move(e), op, parse_concat());
    }
    return e;
  }
  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      next();
      e = binary(std::move(e), "~", parse_math2());
    }
    return e;
  }
  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string op = next().text;
      e = binary(std::move(e), op, parse_pow());
    }
    return e;
  }
  ExprPtr parse_pow() {
    ExprPtr e = parse_unary();
    while (is_op("**")) {
      next();
      e = binary(std::move(e), "**", parse_unary());
    }
    return e;
  }
  // Jinja: `-x | f` is f(-x): a sign binds tighter than the filters that follow.
  ExprPtr parse_unary(bool with_filters = true) {
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = make(Expr::Kind::kUnary, peek().line);
      e->name = next().text;
      e->c.push_back(parse_unary(false));
    } else {
      e = parse_postfix(parse_primary());
    }
    return with_filters ? parse_filters(std::move(e)) : std::move(e);
  }

  // Arguments after "(": positional then keyword; consumes ")".
  void parse_call_args(Expr* call) {
    expect_op("(");
    std::vector<ExprPtr> pos, kw;
    while (!is_op(")")) {
      if (peek().type == T::kName && is_op("=", 1)) {
        call->kwnames.push_back(next().text);
        next();
        kw.push_back(parse_expr());
      } else {
        if (!kw.empty()) fail("a positional argument after a keyword argument", peek().line);
        pos.push_back(parse_expr());
      }
      if (!is_op(",")) break;
      next();
    }
    expect_op(")");
    call->npos = pos.size();
    for (auto& p : pos) call->c.push_back(std::move(p));
    for (auto& k : kw) call->c.push_back(std::move(k));
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    switch (t.type) {
      case T::kName: {
        next();
        if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
          auto e = make(Expr::Kind::kLiteral, t.line);
          e->value = Value::boolean(t.text[0] == 't' || t.text[0] == 'T');
          return e;
        }
        if (t.text == "none" || t.text == "None") {
          auto e = make(Expr::Kind::kLiteral, t.line);
          e->value = Value::none();
          return e;
        }
        auto e = make(Expr::Kind::kName, t.line);
        e->name = t.text;
        return e;
      }
      case T::kString: {
        auto e = make(Expr::Kind::kLiteral, t.line);
        std::string s = next().text;
        while (peek().type == T::kString) s += next().text;  // adjacent literals concatenate
        e->value = Value::string(std::move(s));
        return e;
      }
      case T::kInt: {
        auto e = make(Expr::Kind::kLiteral, t.line);
        e->value = Value::integer(next().int_value);
        return e;
      }
      case T::kFloat: {
        auto e = make(Expr::Kind::kLiteral, t.line);
        e->value = Value::number(next().float_value);
        return e;
      }
      case T::kOp:
        if (t.text == "(") {
          next();
          if (is_op(")")) {
            next();
            return make(Expr::Kind::kTuple, t.line);
          }
          ExprPtr e = parse_expr();
          if (is_op(",")) {
            auto tup = make(Expr::Kind::kTuple, t.line);
            tup->c.push_back(std::move(e));
            while (is_op(",")) {
              next();
              if (is_op(")")) break;
              tup->c.push_back(parse_expr());
            }
            e = std::move(tup);
          }
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          next();
          auto e = make(Expr::Kind::kList, t.line);
          while (!is_op("]")) {
            e->c.push_back(parse_expr());
            if (!is_op(",")) break;
            next();
          }
          expect_op("]");
          return e;
        }
        if (t.text == "{") {
          next();
          auto e = make(Expr::Kind::kDict, t.line);
          while (!is_op("}")) {
            e->c.push_back(parse_expr());
            expect_op(":");
            e->c.push_back(parse_expr());
            if (!is_op(",")) break;
            next();
          }
          expect_op("}");
          return e;
        }
        break;
      default:
        break;
    }
    fail("expected an expression" + found(), t.line);
  }

  ExprPtr parse_postfix(ExprPtr e) {
    for (;;) {
      if (is_op(".")) {
        const int line = next().line;
        if (peek().type == T::kInt) {  // foo.0 is foo[0]
          auto g = make(Expr::Kind::kGetItem, line);
          g->c.push_back(std::move(e));
          auto idx = make(Expr::Kind::kLiteral, line);
          idx->value = Value::integer(next().int_value);
          g->c.push_back(std::move(idx));
          e = std::move(g);
          continue;
        }
        auto g = make(Expr::Kind::kGetAttr, line);
        g->name = expect_name();
        g->c.push_back(std::move(e));
        e = std::move(g);
      } else if (is_op("[")) {
        const int line = next().line;
        ExprPtr parts[3];
        int colons = 0;
        while (!is_op("]")) {
          if (is_op(":")) {
            if (++colons > 2) fail("a slice with more than two ':'", line);
            next();
            continue;
          }
          if (parts[colons]) fail("expected ']' or ':'" + found(), line);
          parts[colons] = parse_expr();
        }
        next();
        if (colons == 0) {
          if (!parts[0]) fail("empty subscript", line);
          auto g = make(Expr::Kind::kGetItem, line);
          g->c.push_back(std::move(e));
          g->c.push_back(std::move(parts[0]));
          e = std::move(g);
        } else {
          auto s = make(Expr::Kind::kSlice, line);
          s->c.push_back(std::move(e));
          for (auto& p : parts) s->c.push_back(std::move(p));
          e = std::move(s);
        }
      } else if (is_op("(")) {
        auto call = make(Expr::Kind::kCall, e->line);
        if (e->kind == Expr::Kind::kName) {
          called_names_.emplace_back(e->name, e->line);
        } else if (e->kind == Expr::Kind::kGetAttr && !is_method(e->name)) {
          fail("unsupported method '" + e->name + "()'", e->line);
        }
        call->c.push_back(std::move(e));
        parse_call_args(call.get());
        e = std::move(call);
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_filters(ExprPtr e) {
    for (;;) {
      if (is_op("|")) {
        const int line = next().line;
        auto f = make(Expr::Kind::kFilter, line);
        f->name = expect_name();
        if (!is_filter(f->name)) fail("unsupported filter '" + f->name + "'", line);
        f->c.push_back(std::move(e));
        if (is_op("(")) parse_call_args(f.get());
        e = std::move(f);
      } else if (is_name("is")) {
        const int line = next().line;
        auto t = make(Expr::Kind::kTest, line);
        if (is_name("not")) {
          next();
          t->negated = true;
        }
        // "is none", "is true": names that are also literals.
        t->name = expect_name();
        if (!is_test(t->name)) fail("unsupported test '" + t->name + "'", line);
        t->c.push_back(std::move(e));
        if (is_op("(")) {
          parse_call_args(t.get());
        } else if (starts_test_arg()) {
          t->c.push_back(parse_postfix(parse_primary()));
          t->npos = 1;
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }
  bool starts_test_arg() const {
    const Token& t = peek();
    if (t.type == T::kString || t.type == T::kInt || t.type == T::kFloat) return true;
    if (t.type == T::kOp) return t.text == "[" || t.text == "{";
    if (t.type == T::kName) {
      return t.text != "else" && t.text != "or" && t.text != "and" && t.text != "if" && t.text != "in" &&
             t.text != "not" && t.text != "is";
    }
    return false;
  }

  const std::vector<Token>& toks_;
  size_t pos_ = 0;
  int loop_depth_ = 0;
  std::set<std::string> macros_;
  std::vector<std::pair<std::string, int>> called_names_;
};

}  // namespace

Body parse(const std::vector<Token>& tokens) { return Parser(tokens).parse_all(); }

}  // namespace moe::jinja
