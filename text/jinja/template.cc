#include "text/jinja/template.h"

#include <limits>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "text/jinja/builtins.h"
#include "text/jinja/errors.h"
#include "text/jinja/parser.h"

namespace pdserve::text::jinja {
namespace {

// "line N: message", keeping the code and payloads (raise_exception's marker), once.
absl::Status AtLine(const absl::Status& status, int line) {
  if (status.ok() || absl::StartsWith(status.message(), "line ")) return status;
  absl::Status out(status.code(), absl::StrCat("line ", line, ": ", status.message()));
  status.ForEachPayload(
      [&](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

class Interpreter {
 public:
  Interpreter(const RenderLimits& limits, std::string* out) : limits_(limits), out_(out) {}

  absl::Status Run(const Body& body, const std::vector<std::pair<std::string, Value>>& variables) {
    frames_.emplace_back();
    for (auto& [name, value] : DefaultGlobals()) frames_.back()[name] = std::move(value);
    for (const auto& [name, value] : variables) frames_.back()[name] = value;
    ASSIGN_OR_RETURN(Flow flow, Exec(body));
    (void)flow;
    return absl::OkStatus();
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  using Frame = absl::flat_hash_map<std::string, Value>;

  absl::Status Step() {
    if (++steps_ > limits_.max_steps)
      return absl::InvalidArgumentError(
          absl::StrCat("template render exceeded ", limits_.max_steps, " steps"));
    return absl::OkStatus();
  }

  absl::Status Write(absl::string_view text) {
    if (out_->size() + text.size() > limits_.max_output_bytes)
      return absl::InvalidArgumentError(
          absl::StrCat("template output exceeds ", limits_.max_output_bytes, " bytes"));
    out_->append(text.data(), text.size());
    return absl::OkStatus();
  }

  Value Lookup(const std::string& name) const {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
      auto found = it->find(name);
      if (found != it->end()) return found->second;
    }
    return Value::Undefined(absl::StrCat("'", name, "' is undefined"));
  }

  absl::Status Assign(const std::vector<std::string>& targets, Value value) {
    if (targets.size() == 1) {
      frames_.back()[targets[0]] = std::move(value);
      return absl::OkStatus();
    }
    if (!value.is_list() || value.list().size() != targets.size()) {
      return absl::InvalidArgumentError(absl::StrCat("cannot unpack type ", value.TypeName(),
                                                     " into ", targets.size(), " names"));
    }
    for (size_t i = 0; i < targets.size(); ++i) frames_.back()[targets[i]] = value.list()[i];
    return absl::OkStatus();
  }

  absl::StatusOr<Flow> Exec(const Body& body) {
    for (const auto& stmt : body) {
      ASSIGN_OR_RETURN(Flow flow, ExecStmt(*stmt));
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  absl::StatusOr<Value> EvalAt(const Expr& e, int line) {
    absl::StatusOr<Value> v = Eval(e);
    if (!v.ok()) return AtLine(v.status(), line);
    return v;
  }

  // Runs `body` into a string of its own (set blocks, filter blocks, macros).
  absl::StatusOr<std::string> Capture(const Body& body) {
    std::string captured;
    std::string* saved = out_;
    out_ = &captured;
    absl::StatusOr<Flow> flow = Exec(body);
    out_ = saved;
    if (!flow.ok()) return flow.status();
    if (saved->size() + captured.size() > limits_.max_output_bytes)
      return absl::InvalidArgumentError("template output too large");
    return captured;
  }

  absl::StatusOr<Flow> ExecStmt(const Stmt& s) {
    RETURN_IF_ERROR(Step());
    switch (s.kind) {
      case Stmt::Kind::kText:
        RETURN_IF_ERROR(Write(s.text));
        return Flow::kNormal;
      case Stmt::Kind::kOutput: {
        ASSIGN_OR_RETURN(Value v, EvalAt(*s.expr, s.line));
        RETURN_IF_ERROR(Write(v.ToString()));
        return Flow::kNormal;
      }
      case Stmt::Kind::kIf:
        for (size_t i = 0; i < s.conditions.size(); ++i) {
          ASSIGN_OR_RETURN(Value cond, EvalAt(*s.conditions[i], s.line));
          if (cond.Truthy()) return Exec(s.bodies[i]);
        }
        return Exec(s.else_body);
      case Stmt::Kind::kFor:
        return ExecFor(s);
      case Stmt::Kind::kSet: {
        ASSIGN_OR_RETURN(Value v, EvalAt(*s.expr, s.line));
        if (s.attr.empty()) {
          RETURN_IF_ERROR(AtLine(Assign(s.targets, std::move(v)), s.line));
          return Flow::kNormal;
        }
        Value target = Lookup(s.targets[0]);
        if (!target.is_dict() || !target.dict().is_namespace) {
          return AtLine(absl::InvalidArgumentError(absl::StrCat("cannot assign attribute '", s.attr,
                                                                "' on '", s.targets[0],
                                                                "', which is not a namespace()")),
                        s.line);
        }
        target.dict().Set(s.attr, std::move(v));
        return Flow::kNormal;
      }
      case Stmt::Kind::kSetBlock: {
        ASSIGN_OR_RETURN(std::string text, Capture(s.body));
        RETURN_IF_ERROR(Assign(s.targets, Value(std::move(text))));
        return Flow::kNormal;
      }
      case Stmt::Kind::kMacro:
        frames_.back()[s.name] = MakeMacro(s);
        return Flow::kNormal;
      case Stmt::Kind::kFilter: {
        ASSIGN_OR_RETURN(std::string text, Capture(s.body));
        const Value base(std::move(text));
        absl::StatusOr<Value> v = EvalFilter(*s.expr, &base);
        if (!v.ok()) return AtLine(v.status(), s.line);
        RETURN_IF_ERROR(Write(v->ToString()));
        return Flow::kNormal;
      }
      case Stmt::Kind::kBreak:
        return Flow::kBreak;
      case Stmt::Kind::kContinue:
        return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  absl::StatusOr<Flow> ExecFor(const Stmt& s) {
    ASSIGN_OR_RETURN(Value iterable, EvalAt(*s.expr, s.line));
    absl::StatusOr<std::vector<Value>> all = Iterate(iterable);
    if (!all.ok()) return AtLine(all.status(), s.line);
    std::vector<Value> items;
    if (s.condition != nullptr) {
      // The filter runs first: loop.index and loop.length count the kept items.
      for (Value& item : *all) {
        frames_.emplace_back();
        absl::Status assigned = Assign(s.targets, item);
        absl::StatusOr<Value> keep = assigned.ok() ? EvalAt(*s.condition, s.line) : assigned;
        frames_.pop_back();
        if (!keep.ok()) return AtLine(keep.status(), s.line);
        if (keep->Truthy()) items.push_back(std::move(item));
      }
    } else {
      items = *std::move(all);
    }
    if (items.empty()) return Exec(s.else_body);
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      RETURN_IF_ERROR(Step());
      frames_.emplace_back();
      auto loop = std::make_shared<Dict>();
      loop->entries = {
          {"index", Value(i + 1)},
          {"index0", Value(i)},
          {"revindex", Value(n - i)},
          {"revindex0", Value(n - i - 1)},
          {"first", Value(i == 0)},
          {"last", Value(i == n - 1)},
          {"length", Value(n)},
          {"depth", Value(int64_t{1})},
          {"depth0", Value(int64_t{0})},
          {"previtem", i > 0 ? items[i - 1] : Value::Undefined("there is no previous item")},
          {"nextitem", i + 1 < n ? items[i + 1] : Value::Undefined("there is no next item")},
          {"cycle", Value::Callable([i](const CallArgs& args) -> absl::StatusOr<Value> {
             if (args.positional.empty())
               return absl::InvalidArgumentError("loop.cycle: needs at least one value");
             return args.positional[static_cast<size_t>(i) % args.positional.size()];
           })},
      };
      frames_.back()["loop"] = Value(std::move(loop));
      absl::Status assigned = Assign(s.targets, items[i]);
      if (!assigned.ok()) {
        frames_.pop_back();
        return AtLine(assigned, s.line);
      }
      absl::StatusOr<Flow> flow = Exec(s.body);
      frames_.pop_back();
      if (!flow.ok()) return flow.status();
      if (*flow == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  Value MakeMacro(const Stmt& s) {
    const Stmt* macro = &s;
    return Value::Callable([this, macro](const CallArgs& args) -> absl::StatusOr<Value> {
      if (call_depth_ >= limits_.max_call_depth)
        return absl::InvalidArgumentError(
            absl::StrCat("macro '", macro->name, "' nested deeper than ", limits_.max_call_depth));
      if (args.positional.size() > macro->params.size())
        return absl::InvalidArgumentError(absl::StrCat("macro '", macro->name, "' takes at most ",
                                                       macro->params.size(), " arguments"));
      // The macro sees the template's top-level names and its own parameters.
      Frame params;
      for (size_t i = 0; i < macro->params.size(); ++i) {
        const auto& [name, def] = macro->params[i];
        if (const Value* given = args.Get(i, name)) {
          params[name] = *given;
        } else if (def != nullptr) {
          ASSIGN_OR_RETURN(params[name], Eval(*def));
        } else {
          params[name] = Value::Undefined(absl::StrCat("'", name, "' is undefined"));
        }
      }
      std::vector<Frame> saved = std::move(frames_);
      frames_.clear();
      frames_.push_back(saved.front());
      frames_.push_back(std::move(params));
      ++call_depth_;
      absl::StatusOr<std::string> text = Capture(macro->body);
      --call_depth_;
      frames_ = std::move(saved);
      if (!text.ok()) return text.status();
      return Value(*std::move(text));
    });
  }

  absl::StatusOr<CallArgs> EvalArgs(const Expr& e, size_t first) {
    CallArgs args;
    for (size_t i = first; i < e.children.size(); ++i) {
      ASSIGN_OR_RETURN(Value v, Eval(*e.children[i]));
      args.positional.push_back(std::move(v));
    }
    for (const auto& [name, expr] : e.kwargs) {
      ASSIGN_OR_RETURN(Value v, Eval(*expr));
      args.keyword.emplace_back(name, std::move(v));
    }
    return args;
  }

  // A filter chain; a null innermost operand is `base` (a filter block's text).
  absl::StatusOr<Value> EvalFilter(const Expr& e, const Value* base) {
    Value operand;
    if (e.children[0] == nullptr) {
      operand = *base;
    } else if (e.children[0]->kind == Expr::Kind::kFilter) {
      ASSIGN_OR_RETURN(operand, EvalFilter(*e.children[0], base));
    } else {
      ASSIGN_OR_RETURN(operand, Eval(*e.children[0]));
    }
    ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1));
    return ApplyFilter(e.name, operand, args);
  }

  // Every value an expression makes is within the render's limits: a string no longer than
  // the output may be, a list no longer than kMaxSequence. Without this, a few doublings
  // (`{% set s = s ~ s %}` in a loop) or chained joins would exhaust memory long before the
  // output limit saw anything.
  absl::StatusOr<Value> Eval(const Expr& e) {
    ASSIGN_OR_RETURN(Value v, EvalUnbounded(e));
    if (v.is_string() && v.as_string().size() > limits_.max_output_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("a string of ", v.as_string().size(),
                                                     " bytes exceeds the template output limit (",
                                                     limits_.max_output_bytes, " bytes)"));
    }
    if (v.is_list() && static_cast<int64_t>(v.list().size()) > kMaxSequence) {
      return absl::InvalidArgumentError(
          absl::StrCat("a list of ", v.list().size(), " items (at most ", kMaxSequence, ")"));
    }
    return v;
  }

  absl::StatusOr<Value> EvalUnbounded(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.literal;
      case Expr::Kind::kName:
        return Lookup(e.name);
      case Expr::Kind::kList: {
        std::vector<Value> items;
        for (const auto& child : e.children) {
          ASSIGN_OR_RETURN(Value v, Eval(*child));
          items.push_back(std::move(v));
        }
        return Value(std::move(items));
      }
      case Expr::Kind::kDict: {
        auto dict = std::make_shared<Dict>();
        for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
          ASSIGN_OR_RETURN(Value key, Eval(*e.children[i]));
          ASSIGN_OR_RETURN(Value value, Eval(*e.children[i + 1]));
          if (!key.is_string())
            return absl::InvalidArgumentError("dict keys must be strings in this Jinja subset");
          dict->Set(key.as_string(), std::move(value));
        }
        return Value(std::move(dict));
      }
      case Expr::Kind::kGetAttr: {
        ASSIGN_OR_RETURN(Value obj, Eval(*e.children[0]));
        return GetAttr(obj, e.name);
      }
      case Expr::Kind::kGetItem: {
        ASSIGN_OR_RETURN(Value obj, Eval(*e.children[0]));
        ASSIGN_OR_RETURN(Value key, Eval(*e.children[1]));
        return GetItem(obj, key);
      }
      case Expr::Kind::kSlice: {
        ASSIGN_OR_RETURN(Value obj, Eval(*e.children[0]));
        Value parts[3];
        for (int i = 0; i < 3; ++i) {
          if (e.children[i + 1] != nullptr) {
            ASSIGN_OR_RETURN(parts[i], Eval(*e.children[i + 1]));
          }
        }
        return SliceValue(obj, parts[0], parts[1], parts[2]);
      }
      case Expr::Kind::kCall: {
        ASSIGN_OR_RETURN(Value callee, Eval(*e.children[0]));
        if (!callee.is_callable()) {
          if (callee.is_undefined()) return absl::InvalidArgumentError(callee.undefined_hint());
          return absl::InvalidArgumentError(
              absl::StrCat("value of type ", callee.TypeName(), " is not callable"));
        }
        ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1));
        return callee.callable()(args);
      }
      case Expr::Kind::kFilter:
        return EvalFilter(e, nullptr);
      case Expr::Kind::kTest: {
        ASSIGN_OR_RETURN(Value operand, Eval(*e.children[0]));
        ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1));
        ASSIGN_OR_RETURN(bool passed, ApplyTest(e.name, operand, args));
        return Value(passed != e.negated);
      }
      case Expr::Kind::kNeg:
      case Expr::Kind::kPos: {
        ASSIGN_OR_RETURN(Value v, Eval(*e.children[0]));
        if (v.is_int() && e.kind == Expr::Kind::kNeg) {
          if (v.as_int() == std::numeric_limits<int64_t>::min())
            return absl::InvalidArgumentError(
                "integer overflow: negating the smallest 64-bit integer");
          return Value(-v.as_int());
        }
        if (v.is_int()) return v;
        if (v.is_float()) return e.kind == Expr::Kind::kNeg ? Value(-v.as_double()) : v;
        return absl::InvalidArgumentError(absl::StrCat("bad operand type for unary ",
                                                       e.kind == Expr::Kind::kNeg ? "-" : "+", ": ",
                                                       v.TypeName()));
      }
      case Expr::Kind::kNot: {
        ASSIGN_OR_RETURN(Value v, Eval(*e.children[0]));
        return Value(!v.Truthy());
      }
      case Expr::Kind::kBinary: {
        ASSIGN_OR_RETURN(Value a, Eval(*e.children[0]));
        ASSIGN_OR_RETURN(Value b, Eval(*e.children[1]));
        return BinaryOp(e.name, a, b);
      }
      case Expr::Kind::kAnd:
      case Expr::Kind::kOr: {
        // Python's and/or return an operand, not a boolean.
        ASSIGN_OR_RETURN(Value a, Eval(*e.children[0]));
        if (a.Truthy() == (e.kind == Expr::Kind::kOr)) return a;
        return Eval(*e.children[1]);
      }
      case Expr::Kind::kCompare: {
        ASSIGN_OR_RETURN(Value left, Eval(*e.children[0]));
        for (size_t i = 0; i < e.ops.size(); ++i) {
          ASSIGN_OR_RETURN(Value right, Eval(*e.children[i + 1]));
          ASSIGN_OR_RETURN(bool holds, Compare(e.ops[i], left, right));
          if (!holds) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case Expr::Kind::kCondExpr: {
        ASSIGN_OR_RETURN(Value cond, Eval(*e.children[0]));
        if (cond.Truthy()) return Eval(*e.children[1]);
        if (e.children[2] == nullptr) return Value::Undefined("the conditional had no else");
        return Eval(*e.children[2]);
      }
    }
    return absl::InternalError("unknown expression");
  }

  const RenderLimits limits_;
  std::string* out_;
  std::vector<Frame> frames_;
  int64_t steps_ = 0;
  int call_depth_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Template>> Template::Parse(absl::string_view source,
                                                          const LexerOptions& options) {
  ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(source, options));
  auto t = std::unique_ptr<Template>(new Template());
  ASSIGN_OR_RETURN(t->body_, jinja::Parse(tokens));
  return t;
}

absl::StatusOr<std::string> Template::Render(
    const std::vector<std::pair<std::string, Value>>& variables, const RenderLimits& limits) const {
  std::string out;
  Interpreter interpreter(limits, &out);
  RETURN_IF_ERROR(interpreter.Run(body_, variables));
  return out;
}

}  // namespace pdserve::text::jinja
