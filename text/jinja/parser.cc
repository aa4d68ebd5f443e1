#include "text/jinja/parser.h"

#include <cstdlib>
#include <initializer_list>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pdserve::text::jinja {
namespace {

// Deeper expressions than this are refused rather than risking the stack.
constexpr int kMaxDepth = 200;

ExprPtr MakeExpr(Expr::Kind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : tokens_(tokens) {}

  absl::StatusOr<Body> Run() {
    std::string end_tag;
    ASSIGN_OR_RETURN(Body body, ParseBody({}, &end_tag));
    return body;
  }

 private:
  const Token& Peek(size_t ahead = 0) const {
    const size_t i = std::min(pos_ + ahead, tokens_.size() - 1);
    return tokens_[i];
  }
  const Token& Next() {
    const Token& t = Peek();
    if (pos_ < tokens_.size() - 1) ++pos_;
    return t;
  }
  bool IsOp(absl::string_view op, size_t ahead = 0) const {
    return Peek(ahead).kind == Token::Kind::kOp && Peek(ahead).text == op;
  }
  bool IsName(absl::string_view name, size_t ahead = 0) const {
    return Peek(ahead).kind == Token::Kind::kName && Peek(ahead).text == name;
  }
  bool AcceptOp(absl::string_view op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool AcceptName(absl::string_view name) {
    if (!IsName(name)) return false;
    Next();
    return true;
  }
  absl::Status Fail(absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat("line ", Peek().line, ": ", message));
  }
  static std::string Describe(const Token& t) {
    switch (t.kind) {
      case Token::Kind::kEnd:
        return "end of template";
      case Token::Kind::kText:
        return "text";
      case Token::Kind::kExprOpen:
        return "'{{'";
      case Token::Kind::kExprClose:
        return "'}}'";
      case Token::Kind::kStmtOpen:
        return "'{%'";
      case Token::Kind::kStmtClose:
        return "'%}'";
      case Token::Kind::kString:
        return "a string";
      default:
        return absl::StrCat("'", t.text, "'");
    }
  }
  absl::Status ExpectOp(absl::string_view op) {
    if (AcceptOp(op)) return absl::OkStatus();
    return Fail(absl::StrCat("expected '", op, "', found ", Describe(Peek())));
  }
  absl::Status ExpectKind(Token::Kind kind, absl::string_view what) {
    if (Peek().kind == kind) {
      Next();
      return absl::OkStatus();
    }
    return Fail(absl::StrCat("expected ", what, ", found ", Describe(Peek())));
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Peek().kind != Token::Kind::kName)
      return Fail(absl::StrCat("expected a name, found ", Describe(Peek())));
    return Next().text;
  }

  // Statements until a tag named in `ends` (consumed up to its name; *end_tag says which), or
  // the end of the template when `ends` is empty.
  absl::StatusOr<Body> ParseBody(std::initializer_list<absl::string_view> ends,
                                 std::string* end_tag) {
    Body body;
    while (true) {
      const Token& t = Peek();
      if (t.kind == Token::Kind::kEnd) {
        if (ends.size() == 0) return body;
        return Fail(absl::StrCat("missing '{% ", *(ends.end() - 1), " %}'"));
      }
      if (t.kind == Token::Kind::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kText;
        s->line = t.line;
        s->text = Next().text;
        body.push_back(std::move(s));
        continue;
      }
      if (t.kind == Token::Kind::kExprOpen) {
        Next();
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kOutput;
        s->line = t.line;
        ASSIGN_OR_RETURN(s->expr, ParseTupleOrExpression());
        RETURN_IF_ERROR(ExpectKind(Token::Kind::kExprClose, "'}}'"));
        body.push_back(std::move(s));
        continue;
      }
      if (t.kind != Token::Kind::kStmtOpen) return Fail(absl::StrCat("unexpected ", Describe(t)));
      const Token& tag = Peek(1);
      if (tag.kind != Token::Kind::kName) return Fail("expected a tag name after '{%'");
      for (absl::string_view end : ends) {
        if (tag.text == end) {
          Next();
          Next();
          *end_tag = tag.text;
          return body;
        }
      }
      Next();
      ASSIGN_OR_RETURN(std::unique_ptr<Stmt> s, ParseTag());
      if (s != nullptr) body.push_back(std::move(s));
    }
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseTag() {
    const Token& tag = Next();
    auto s = std::make_unique<Stmt>();
    s->line = tag.line;
    const std::string& name = tag.text;
    std::string end;
    if (name == "if") {
      s->kind = Stmt::Kind::kIf;
      while (true) {
        ASSIGN_OR_RETURN(ExprPtr cond, ParseExpression());
        RETURN_IF_ERROR(ExpectKind(Token::Kind::kStmtClose, "'%}'"));
        ASSIGN_OR_RETURN(Body body, ParseBody({"elif", "else", "endif"}, &end));
        s->conditions.push_back(std::move(cond));
        s->bodies.push_back(std::move(body));
        if (end != "elif") break;
      }
      if (end == "else") {
        RETURN_IF_ERROR(ExpectKind(Token::Kind::kStmtClose, "'%}'"));
        ASSIGN_OR_RETURN(s->else_body, ParseBody({"endif"}, &end));
      }
    } else if (name == "for") {
      s->kind = Stmt::Kind::kFor;
      ASSIGN_OR_RETURN(s->targets, ParseTargets());
      if (!AcceptName("in")) return Fail("expected 'in' in a for tag");
      ASSIGN_OR_RETURN(s->expr, ParseTupleOrExpression(/*with_condexpr=*/false));
      if (AcceptName("if")) {
        ASSIGN_OR_RETURN(s->condition, ParseExpression());
      }
      if (IsName("recursive")) return Fail("recursive for loops are not supported");
      RETURN_IF_ERROR(ExpectKind(Token::Kind::kStmtClose, "'%}'"));
      ASSIGN_OR_RETURN(s->body, ParseBody({"else", "endfor"}, &end));
      if (end == "else") {
        RETURN_IF_ERROR(ExpectKind(Token::Kind::kStmtClose, "'%}'"));
        ASSIGN_OR_RETURN(s->else_body, ParseBody({"endfor"}, &end));
      }
    } else if (name == "set") {
      ASSIGN_OR_RETURN(s->targets, ParseTargets());
      if (s->targets.size() == 1 && AcceptOp(".")) {
        ASSIGN_OR_RETURN(s->attr, ExpectName());
      }
      if (AcceptOp("=")) {
        s->kind = Stmt::Kind::kSet;
        ASSIGN_OR_RETURN(s->expr, ParseTupleOrExpression());
      } else {
        if (s->targets.size() != 1 || !s->attr.empty()) return Fail("a block set assigns one name");
        s->kind = Stmt::Kind::kSetBlock;
        RETURN_IF_ERROR(ExpectKind(Token::Kind::kStmtClose, "'%}'"));
        ASSIGN_OR_RETURN(s->body, ParseBody({"endset"}, &end));
      }
    } else if (name == "macro") {
      s->kind = Stmt::Kind::kMacro;
      ASSIGN_OR_RETURN(s->name, ExpectName());
      RETURN_IF_ERROR(ExpectOp("("));
      while (!AcceptOp(")")) {
        if (!s->params.empty()) RETURN_IF_ERROR(ExpectOp(","));
        if (AcceptOp(")")) break;
        ASSIGN_OR_RETURN(std::string param, ExpectName());
        ExprPtr def;
        if (AcceptOp("=")) {
          ASSIGN_OR_RETURN(def, ParseExpression());
        }
        s->params.emplace_back(std::move(param), std::move(def));
      }
      RETURN_IF_ERROR(ExpectKind(Token::Kind::kStmtClose, "'%}'"));
      ASSIGN_OR_RETURN(s->body, ParseBody({"endmacro"}, &end));
    } else if (name == "filter") {
      s->kind = Stmt::Kind::kFilter;
      ASSIGN_OR_RETURN(s->expr, ParseFilters(nullptr, /*require=*/true));
      RETURN_IF_ERROR(ExpectKind(Token::Kind::kStmtClose, "'%}'"));
      ASSIGN_OR_RETURN(s->body, ParseBody({"endfilter"}, &end));
    } else if (name == "break" || name == "continue") {
      s->kind = name == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
    } else if (name == "generation" || name == "endgeneration") {
      // transformers' assistant-mask markers render nothing.
      s = nullptr;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", tag.line, ": unknown or unsupported tag '", name, "'"));
    }
    RETURN_IF_ERROR(ExpectKind(Token::Kind::kStmtClose, "'%}'"));
    return s;
  }

  // name | name, name | (name, name)
  absl::StatusOr<std::vector<std::string>> ParseTargets() {
    std::vector<std::string> names;
    const bool paren = AcceptOp("(");
    do {
      ASSIGN_OR_RETURN(std::string n, ExpectName());
      names.push_back(std::move(n));
    } while (AcceptOp(","));
    if (paren) RETURN_IF_ERROR(ExpectOp(")"));
    return names;
  }

  // An expression, or a tuple of them ("a, b"), which evaluates to a list.
  absl::StatusOr<ExprPtr> ParseTupleOrExpression(bool with_condexpr = true) {
    const int line = Peek().line;
    ASSIGN_OR_RETURN(ExprPtr first, ParseExpression(with_condexpr));
    if (!IsOp(",")) return first;
    auto tuple = MakeExpr(Expr::Kind::kList, line);
    tuple->children.push_back(std::move(first));
    while (AcceptOp(",")) {
      if (Peek().kind == Token::Kind::kStmtClose || Peek().kind == Token::Kind::kExprClose) break;
      ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(with_condexpr));
      tuple->children.push_back(std::move(item));
    }
    return tuple;
  }

  absl::StatusOr<ExprPtr> ParseExpression(bool with_condexpr = true) {
    if (++depth_ > kMaxDepth) return Fail("expression nested too deeply");
    absl::StatusOr<ExprPtr> result = ParseConditional(with_condexpr);
    --depth_;
    return result;
  }

  absl::StatusOr<ExprPtr> ParseConditional(bool with_condexpr) {
    ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
    while (with_condexpr && IsName("if")) {
      const int line = Next().line;
      auto cond = MakeExpr(Expr::Kind::kCondExpr, line);
      ASSIGN_OR_RETURN(ExprPtr test, ParseOr());
      ExprPtr otherwise;
      if (AcceptName("else")) {
        ASSIGN_OR_RETURN(otherwise, ParseExpression());
      }
      cond->children.push_back(std::move(test));
      cond->children.push_back(std::move(expr));
      cond->children.push_back(std::move(otherwise));
      expr = std::move(cond);
    }
    return expr;
  }

  absl::StatusOr<ExprPtr> ParseOr() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
    while (IsName("or")) {
      auto e = MakeExpr(Expr::Kind::kOr, Next().line);
      ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
      e->children.push_back(std::move(left));
      e->children.push_back(std::move(right));
      left = std::move(e);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseAnd() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
    while (IsName("and")) {
      auto e = MakeExpr(Expr::Kind::kAnd, Next().line);
      ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
      e->children.push_back(std::move(left));
      e->children.push_back(std::move(right));
      left = std::move(e);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseNot() {
    if (IsName("not")) {
      auto e = MakeExpr(Expr::Kind::kNot, Next().line);
      if (++depth_ > kMaxDepth) return Fail("expression nested too deeply");
      absl::StatusOr<ExprPtr> operand = ParseNot();
      --depth_;
      if (!operand.ok()) return operand.status();
      e->children.push_back(*std::move(operand));
      return e;
    }
    return ParseCompare();
  }

  absl::StatusOr<ExprPtr> ParseCompare() {
    const int line = Peek().line;
    ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (Peek().kind == Token::Kind::kOp &&
          (IsOp("==") || IsOp("!=") || IsOp("<") || IsOp("<=") || IsOp(">") || IsOp(">="))) {
        op = Next().text;
      } else if (IsName("in")) {
        Next();
        op = "in";
      } else if (IsName("not") && IsName("in", 1)) {
        Next();
        Next();
        op = "not in";
      } else {
        break;
      }
      if (cmp == nullptr) {
        cmp = MakeExpr(Expr::Kind::kCompare, line);
        cmp->children.push_back(std::move(first));
      }
      ASSIGN_OR_RETURN(ExprPtr operand, ParseMath1());
      cmp->ops.push_back(std::move(op));
      cmp->children.push_back(std::move(operand));
    }
    return cmp != nullptr ? std::move(cmp) : std::move(first);
  }

  // Left-associative binary levels.
  template <typename Operand>
  absl::StatusOr<ExprPtr> Binary(std::initializer_list<absl::string_view> ops, Operand next) {
    ASSIGN_OR_RETURN(ExprPtr left, next());
    while (true) {
      const absl::string_view* op = nullptr;
      for (const absl::string_view& o : ops) {
        if (IsOp(o)) op = &o;
      }
      if (op == nullptr) return left;
      auto e = MakeExpr(Expr::Kind::kBinary, Peek().line);
      e->name = std::string(*op);
      Next();
      ASSIGN_OR_RETURN(ExprPtr right, next());
      e->children.push_back(std::move(left));
      e->children.push_back(std::move(right));
      left = std::move(e);
    }
  }
  absl::StatusOr<ExprPtr> ParseMath1() {
    return Binary({"+", "-"}, [this] { return ParseConcat(); });
  }
  absl::StatusOr<ExprPtr> ParseConcat() {
    return Binary({"~"}, [this] { return ParseMath2(); });
  }
  absl::StatusOr<ExprPtr> ParseMath2() {
    return Binary({"*", "/", "//", "%"}, [this] { return ParsePow(); });
  }
  absl::StatusOr<ExprPtr> ParsePow() {
    return Binary({"**"}, [this] { return ParseUnary(true); });
  }

  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter) {
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      auto e = MakeExpr(IsOp("-") ? Expr::Kind::kNeg : Expr::Kind::kPos, Peek().line);
      Next();
      if (++depth_ > kMaxDepth) return Fail("expression nested too deeply");
      absl::StatusOr<ExprPtr> operand = ParseUnary(false);
      --depth_;
      if (!operand.ok()) return operand.status();
      e->children.push_back(*std::move(operand));
      node = std::move(e);
    } else {
      ASSIGN_OR_RETURN(node, ParsePrimary());
    }
    ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    if (with_filter) {
      ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
    }
    return node;
  }

  absl::StatusOr<ExprPtr> ParsePrimary() {
    const Token& t = Peek();
    switch (t.kind) {
      case Token::Kind::kName: {
        Next();
        auto e = MakeExpr(Expr::Kind::kLiteral, t.line);
        if (t.text == "true" || t.text == "True") {
          e->literal = Value(true);
        } else if (t.text == "false" || t.text == "False") {
          e->literal = Value(false);
        } else if (t.text == "none" || t.text == "None") {
          e->literal = Value::None();
        } else {
          e->kind = Expr::Kind::kName;
          e->name = t.text;
        }
        return e;
      }
      case Token::Kind::kString: {
        std::string s = Next().text;
        while (Peek().kind == Token::Kind::kString) s += Next().text;  // "a" "b" == "ab".
        auto e = MakeExpr(Expr::Kind::kLiteral, t.line);
        e->literal = Value(std::move(s));
        return e;
      }
      case Token::Kind::kInt: {
        Next();
        auto e = MakeExpr(Expr::Kind::kLiteral, t.line);
        errno = 0;
        const long long v = std::strtoll(t.text.c_str(), nullptr, 10);
        if (errno == ERANGE) return Fail(absl::StrCat("integer literal out of range: ", t.text));
        e->literal = Value(static_cast<int64_t>(v));
        return e;
      }
      case Token::Kind::kFloat: {
        Next();
        auto e = MakeExpr(Expr::Kind::kLiteral, t.line);
        e->literal = Value(std::strtod(t.text.c_str(), nullptr));
        return e;
      }
      case Token::Kind::kOp:
        if (t.text == "(") {
          Next();
          if (AcceptOp(")")) return MakeExpr(Expr::Kind::kList, t.line);  // ()
          ASSIGN_OR_RETURN(ExprPtr inner, ParseTupleOrExpression());
          RETURN_IF_ERROR(ExpectOp(")"));
          return inner;
        }
        if (t.text == "[") {
          Next();
          auto list = MakeExpr(Expr::Kind::kList, t.line);
          while (!AcceptOp("]")) {
            if (!list->children.empty()) RETURN_IF_ERROR(ExpectOp(","));
            if (AcceptOp("]")) break;
            ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
            list->children.push_back(std::move(item));
          }
          return list;
        }
        if (t.text == "{") {
          Next();
          auto dict = MakeExpr(Expr::Kind::kDict, t.line);
          while (!AcceptOp("}")) {
            if (!dict->children.empty()) RETURN_IF_ERROR(ExpectOp(","));
            if (AcceptOp("}")) break;
            ASSIGN_OR_RETURN(ExprPtr key, ParseExpression());
            RETURN_IF_ERROR(ExpectOp(":"));
            ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
            dict->children.push_back(std::move(key));
            dict->children.push_back(std::move(value));
          }
          return dict;
        }
        break;
      default:
        break;
    }
    return Fail(absl::StrCat("unexpected ", Describe(t)));
  }

  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      if (IsOp(".")) {
        const int line = Next().line;
        if (Peek().kind == Token::Kind::kInt) {  // x.0 is x[0].
          auto e = MakeExpr(Expr::Kind::kGetItem, line);
          ASSIGN_OR_RETURN(ExprPtr index, ParsePrimary());
          e->children.push_back(std::move(node));
          e->children.push_back(std::move(index));
          node = std::move(e);
          continue;
        }
        auto e = MakeExpr(Expr::Kind::kGetAttr, line);
        ASSIGN_OR_RETURN(e->name, ExpectName());
        e->children.push_back(std::move(node));
        node = std::move(e);
      } else if (IsOp("[")) {
        ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
      } else if (IsOp("(")) {
        ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr target) {
    const int line = Next().line;  // "["
    ExprPtr parts[3];
    int colons = 0;
    while (!IsOp("]")) {
      if (AcceptOp(":")) {
        if (++colons > 2) return Fail("too many ':' in a subscript");
        continue;
      }
      if (parts[colons] != nullptr) return Fail("expected ':' or ']' in a subscript");
      ASSIGN_OR_RETURN(parts[colons], ParseExpression());
    }
    Next();
    if (colons == 0) {
      if (parts[0] == nullptr) return Fail("empty subscript");
      auto e = MakeExpr(Expr::Kind::kGetItem, line);
      e->children.push_back(std::move(target));
      e->children.push_back(std::move(parts[0]));
      return e;
    }
    auto e = MakeExpr(Expr::Kind::kSlice, line);
    e->children.push_back(std::move(target));
    for (auto& p : parts) e->children.push_back(std::move(p));
    return e;
  }

  // "(" args ")" after a callee (kCall) or into an existing filter/test node.
  absl::Status ParseArgs(Expr* into) {
    RETURN_IF_ERROR(ExpectOp("("));
    bool first = true;
    while (!AcceptOp(")")) {
      if (!first) RETURN_IF_ERROR(ExpectOp(","));
      first = false;
      if (AcceptOp(")")) break;
      if (Peek().kind == Token::Kind::kName && IsOp("=", 1)) {
        std::string key = Next().text;
        Next();
        ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
        into->kwargs.emplace_back(std::move(key), std::move(value));
      } else {
        if (!into->kwargs.empty()) return Fail("positional argument after a keyword argument");
        ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
        into->children.push_back(std::move(value));
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<ExprPtr> ParseCall(ExprPtr callee) {
    auto e = MakeExpr(Expr::Kind::kCall, Peek().line);
    e->children.push_back(std::move(callee));
    RETURN_IF_ERROR(ParseArgs(e.get()));
    return e;
  }

  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node) {
    while (true) {
      if (IsOp("|")) {
        ASSIGN_OR_RETURN(node, ParseFilters(std::move(node), /*require=*/true));
      } else if (IsName("is")) {
        ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
      } else if (IsOp("(")) {
        ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  // One or more "| name[(args)]"; `node` may be null (a filter block's filters).
  absl::StatusOr<ExprPtr> ParseFilters(ExprPtr node, bool require) {
    bool first = true;
    while (first ? (require || IsOp("|")) : IsOp("|")) {
      if (!(first && node == nullptr)) RETURN_IF_ERROR(ExpectOp("|"));
      first = false;
      auto e = MakeExpr(Expr::Kind::kFilter, Peek().line);
      ASSIGN_OR_RETURN(e->name, ExpectName());
      while (AcceptOp(".")) {  // Dotted filter names.
        ASSIGN_OR_RETURN(std::string part, ExpectName());
        absl::StrAppend(&e->name, ".", part);
      }
      e->children.push_back(std::move(node));
      if (IsOp("(")) RETURN_IF_ERROR(ParseArgs(e.get()));
      node = std::move(e);
    }
    return node;
  }

  absl::StatusOr<ExprPtr> ParseTest(ExprPtr node) {
    auto e = MakeExpr(Expr::Kind::kTest, Next().line);  // "is"
    e->negated = AcceptName("not");
    ASSIGN_OR_RETURN(e->name, ExpectName());
    e->children.push_back(std::move(node));
    if (IsOp("(")) {
      RETURN_IF_ERROR(ParseArgs(e.get()));
    } else {
      // "is divisibleby 3", "is sameas false": one argument without parentheses.
      const Token& t = Peek();
      static const absl::flat_hash_set<std::string> kNotAnArgument = {"else", "or",  "and", "if",
                                                                      "is",   "not", "in"};
      const bool starts_primary =
          t.kind == Token::Kind::kString || t.kind == Token::Kind::kInt ||
          t.kind == Token::Kind::kFloat || IsOp("[") || IsOp("{") ||
          (t.kind == Token::Kind::kName && !kNotAnArgument.contains(t.text));
      if (starts_primary) {
        ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
        ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
        e->children.push_back(std::move(arg));
      }
    }
    return e;
  }

  const std::vector<Token>& tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

absl::StatusOr<Body> Parse(const std::vector<Token>& tokens) {
  if (tokens.empty()) return Body();
  return Parser(tokens).Run();
}

}  // namespace pdserve::text::jinja
