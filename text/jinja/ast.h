// The syntax tree of a parsed template (text/jinja/parser.h builds it, interpreter.h walks
// it). Expressions and statements are one node type each, with a kind; the fields a kind uses
// are listed on it.
// Thread-safety: immutable after parsing.
#ifndef PDSERVE_TEXT_JINJA_AST_H_
#define PDSERVE_TEXT_JINJA_AST_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/value.h"

namespace pdserve::text::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,   // literal
    kName,      // name
    kList,      // children: items
    kDict,      // children: key, value, key, value...
    kGetAttr,   // children[0] . name
    kGetItem,   // children[0] [ children[1] ]
    kSlice,     // children[0] [ children[1] : children[2] : children[3] ] (null: omitted)
    kCall,      // children[0] ( children[1..], kwargs )
    kFilter,    // children[0] | name ( children[1..], kwargs )
    kTest,      // children[0] is [not: negated] name ( children[1..], kwargs )
    kNeg,       // - children[0]
    kPos,       // + children[0]
    kNot,       // not children[0]
    kBinary,    // children[0] op children[1]; op is one of + - * / // % ** ~
    kAnd,       // children[0] and children[1]
    kOr,        // children[0] or children[1]
    kCompare,   // children[0] ops[0] children[1] ops[1] children[2]... (chained, as Python)
    kCondExpr,  // children[1] if children[0] else children[2] (null: undefined)
  };
  Kind kind;
  int line = 0;
  Value literal;
  std::string name;  // kName, kGetAttr, kFilter, kTest; the operator of kBinary.
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // kCompare: ==, !=, <, <=, >, >=, in, not in.
  bool negated = false;          // kTest: "is not".
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // if/elif: conditions[i] -> bodies[i]; else: else_body
    kFor,       // for targets in expr [if condition]: body; else: else_body
    kSet,       // set targets = expr; or set targets[0].attr = expr (attr non-empty)
    kSetBlock,  // set targets[0]: body
    kMacro,     // macro name(params = defaults): body
    kFilter,    // filter expr (a kFilter whose children[0] is null): body
    kBreak,
    kContinue,
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;  // kFor's filter.
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;
  Body body;
  Body else_body;
  std::vector<std::string> targets;
  std::string attr;
  std::string name;                                     // kMacro.
  std::vector<std::pair<std::string, ExprPtr>> params;  // kMacro; default null when none.
};

}  // namespace pdserve::text::jinja

#endif  // PDSERVE_TEXT_JINJA_AST_H_
