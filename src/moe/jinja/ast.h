// The Jinja syntax tree (built by parser.cc, walked by evaluator.cc). Immutable once
// parsed; owned by the Template.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "moe/jinja/value.h"

namespace moe::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // value
    kName,     // name
    kGetAttr,  // c[0].name
    kGetItem,  // c[0][c[1]]
    kSlice,    // c[0][c[1]:c[2]:c[3]] (absent parts are null)
    kCall,     // c[0](c[1..npos], kwargs c[npos+1..] named kwnames)
    kFilter,   // c[0] | name(c[1..npos], kwargs)
    kTest,     // c[0] is [not] name(c[1..npos], kwargs)
    kUnary,    // name ("-", "+", "not") c[0]
    kBinary,   // c[0] name c[1]: + - * / // % ** ~ == != < > <= >= in "not in"
    kAnd,
    kOr,
    kCond,   // c[0] if c[1] else c[2] (c[2] may be null)
    kList,   // [c...]
    kTuple,  // (c...)
    kDict,   // {c[0]: c[1], c[2]: c[3], ...}
  };
  Kind kind = Kind::kLiteral;
  int line = 0;
  std::string name;
  Value value;
  bool negated = false;  // kTest: "is not"
  size_t npos = 0;       // kCall/kFilter/kTest: positional args (after c[0])
  std::vector<std::string> kwnames;
  std::vector<ExprPtr> c;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind { kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kBreak, kContinue };
  Kind kind = Kind::kText;
  int line = 0;
  std::string text;                  // kText
  ExprPtr expr;                      // kOutput, kSet value, kFor iterable, kSet target object (ns)
  ExprPtr target_object;             // kSet/kSetBlock "ns.attr": the ns expression
  std::vector<std::string> targets;  // kFor/kSet/kSetBlock names (kSet with target_object: the attr)
  std::vector<std::pair<ExprPtr, Body>> branches;  // kIf: condition + body
  Body body;                                       // kFor/kSetBlock/kMacro
  Body else_body;                                  // kIf/kFor
  ExprPtr filter;                                  // kFor "if" condition
  std::vector<std::string> params;                 // kMacro (name = text)
  std::vector<ExprPtr> defaults;                   // kMacro: one per param (null = none)
};

}  // namespace moe::jinja
