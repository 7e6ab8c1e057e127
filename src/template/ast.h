// The Jinja syntax tree: expression and statement nodes as produced by the parser and walked by
// the interpreter. Each node keeps its template line for error messages.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/value.h"

namespace pagoda::jinja {

enum class ExprKind {
  kConst,      // value
  kName,       // name
  kList,       // children = items
  kTuple,      // children = items
  kDict,       // children = key0, value0, key1, value1, ...
  kGetAttr,    // children[0].name
  kGetItem,    // children[0][children[1]]
  kSlice,      // children = start, stop, step (nullptr when absent)
  kCall,       // children[0](children[1..], kwargs)
  kFilter,     // children[0] | name(children[1..], kwargs); children[0] null in filter blocks
  kTest,       // children[0] is name(children[1..]); negated when `flag`
  kNeg,        // -children[0]
  kPos,        // +children[0]
  kNot,        // not children[0]
  kBinary,     // children[0] op children[1]; op in name: + - * / // % **
  kAnd,        // short-circuit
  kOr,         // short-circuit
  kConcat,     // children joined with ~
  kCompare,    // children[0] ops[0] children[1] ops[1] children[2] ...
  kCondition,  // children[1] if children[0] else children[2] (children[2] may be null)
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind;
  int line = 0;
  Value value;
  std::string name;
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool flag = false;
};

enum class StmtKind {
  kText,       // text
  kOutput,     // {{ expr }}
  kIf,         // conditions[i] -> bodies[i]; bodies.back() is else when bodies > conditions
  kFor,        // target in iter [if filter] body else else_body
  kSet,        // target = expr
  kSetBlock,   // {% set target %}body{% endset %}, optional filter expr (filter chain, base null)
  kMacro,      // name(params) body
  kCallBlock,  // {% call(params) expr %}body{% endcall %}
  kFilterBlock,
  kWith,  // assignments then body
  kBreak,
  kContinue,
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// An assignment target: a name, `ns.attr`, or a tuple of names for unpacking.
struct Target {
  std::vector<std::string> names;  // one name, or several for tuple unpacking
  bool is_tuple = false;
  std::string attribute;  // set for `ns.attr`
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;  // kText; macro name
  ExprPtr expr;      // output / set value / for iterable / call expr / filter chain
  ExprPtr filter;    // for-loop filter; set-block filter
  Target target;
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;  // if branches; [0] = body, [1] = else for `for`
  std::vector<MacroParam> params;
  std::vector<std::pair<std::string, ExprPtr>> assignments;  // with
};

}  // namespace pagoda::jinja
