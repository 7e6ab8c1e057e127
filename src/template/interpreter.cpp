// Jinja evaluator (see interpreter.h). Scopes live in an arena owned by one render call, so macros
// may capture the scope they were defined in (jinja2 closures) without reference cycles.
#include "template/interpreter.h"

#include <ctime>
#include <deque>

#include <fmt/format.h>

#include "template/builtins.h"
#include "template/operations.h"

namespace pagoda::jinja {
namespace {

// The sandbox's limit on range() (jinja2.sandbox.MAX_RANGE).
constexpr int64_t kMaxRange = 100000;
// Nested macro calls allowed; CPython's jinja2 stops recursive macros at its recursion limit.
constexpr int kMaxMacroDepth = 100;

struct Scope {
  Scope* parent = nullptr;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* find(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent) {
      for (const auto& [k, v] : s->vars) {
        if (k == name) return &v;
      }
    }
    return nullptr;
  }
  void set(const std::string& name, Value value) {
    for (auto& [k, v] : vars) {
      if (k == name) {
        v = std::move(value);
        return;
      }
    }
    vars.emplace_back(name, std::move(value));
  }
};

class LoopObject : public Object, public std::enable_shared_from_this<LoopObject> {
 public:
  explicit LoopObject(ValueList items) : items_(std::move(items)) {}
  std::string type_name() const override { return "LoopContext"; }
  void set_index(size_t index) { index_ = index; }

  Value get_attr(const std::string& name) override {
    int64_t n = static_cast<int64_t>(items_.size());
    int64_t i = static_cast<int64_t>(index_);
    if (name == "index") return Value(i + 1);
    if (name == "index0") return Value(i);
    if (name == "revindex") return Value(n - i);
    if (name == "revindex0") return Value(n - i - 1);
    if (name == "first") return Value(i == 0);
    if (name == "last") return Value(i == n - 1);
    if (name == "length") return Value(n);
    if (name == "depth") return Value(int64_t{1});
    if (name == "depth0") return Value(int64_t{0});
    if (name == "previtem") {
      return i > 0 ? items_[index_ - 1] : Value::undefined("there is no previous item");
    }
    if (name == "nextitem") {
      return i + 1 < n ? items_[index_ + 1] : Value::undefined("there is no next item");
    }
    if (name == "cycle") {
      size_t index = index_;
      return Value::callable("cycle", [index](CallArgs& a) -> Value {
        if (a.args.empty()) throw TemplateError("no items for cycling given");
        return a.args[index % a.args.size()];
      });
    }
    if (name == "changed") {
      auto self = shared_from_this();
      return Value::callable("changed", [self](CallArgs& a) -> Value {
        Value current = Value::list(a.args);
        if (self->has_last_changed_ && self->last_changed_.equals(current)) return Value(false);
        self->has_last_changed_ = true;
        self->last_changed_ = current;
        return Value(true);
      });
    }
    return Value::undefined();
  }

 private:
  ValueList items_;
  size_t index_ = 0;
  bool has_last_changed_ = false;
  Value last_changed_;
};

class CyclerObject : public Object, public std::enable_shared_from_this<CyclerObject> {
 public:
  explicit CyclerObject(ValueList items) : items_(std::move(items)) {}
  std::string type_name() const override { return "Cycler"; }
  Value get_attr(const std::string& name) override {
    auto self = shared_from_this();
    if (name == "current") return items_[pos_];
    if (name == "next") {
      return Value::callable("next", [self](CallArgs&) {
        Value v = self->items_[self->pos_];
        self->pos_ = (self->pos_ + 1) % self->items_.size();
        return v;
      });
    }
    if (name == "reset") {
      return Value::callable("reset", [self](CallArgs&) {
        self->pos_ = 0;
        return Value();
      });
    }
    return Value::undefined();
  }

 private:
  ValueList items_;
  size_t pos_ = 0;
};

enum class Flow { kNormal, kBreak, kContinue };

class Interpreter {
 public:
  std::string run(const Body& body, const std::vector<std::pair<std::string, Value>>& variables) {
    Scope* globals = new_scope(nullptr);
    add_globals(*globals);
    for (const auto& [k, v] : variables) globals->set(k, v);
    Scope* root = new_scope(globals);
    std::string out;
    exec_body(body, root, out);
    return out;
  }

 private:
  Scope* new_scope(Scope* parent) {
    scopes_.emplace_back();
    scopes_.back().parent = parent;
    return &scopes_.back();
  }

  static void add_globals(Scope& g) {
    g.set("range", Value::callable("range", [](CallArgs& a) {
            a.check("range", 3, {});
            if (a.args.empty()) throw TemplateError("range expected at least 1 argument, got 0");
            for (const auto& x : a.args) {
              if (!x.is_int() && !x.is_bool()) {
                throw TemplateError(
                    fmt::format("'{}' object cannot be interpreted as an integer", x.type_name()));
              }
            }
            int64_t start = 0, stop = 0, step = 1;
            if (a.args.size() == 1) {
              stop = a.args[0].to_int();
            } else {
              start = a.args[0].to_int();
              stop = a.args[1].to_int();
              if (a.args.size() == 3) step = a.args[2].to_int();
            }
            if (step == 0) throw TemplateError("range() arg 3 must not be zero");
            ValueList out;
            for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
              if (static_cast<int64_t>(out.size()) >= kMaxRange) {
                throw TemplateError(
                    "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
              }
              out.emplace_back(i);
            }
            std::string repr = step == 1 ? fmt::format("range({}, {})", start, stop)
                                         : fmt::format("range({}, {}, {})", start, stop, step);
            return Value::view(std::move(out), "range", std::move(repr), true);
          }));
    auto make_mapping = [](CallArgs& a, Value target) {
      if (a.args.size() > 1) throw TemplateError("expected at most 1 positional argument");
      if (!a.args.empty()) {
        if (!a.args[0].is_dict()) throw TemplateError("expected a mapping argument");
        for (const auto& [k, v] : a.args[0].dict_ref().entries) target.mutable_dict().set(k, v);
      }
      for (const auto& [k, v] : a.kwargs) target.mutable_dict().set(Value(k), v);
      return target;
    };
    g.set("dict", Value::callable("dict", [make_mapping](CallArgs& a) {
            return make_mapping(a, Value::dict());
          }));
    g.set("namespace", Value::callable("namespace", [make_mapping](CallArgs& a) {
            return make_mapping(a, Value::namespace_object());
          }));
    g.set("raise_exception", Value::callable("raise_exception", [](CallArgs& a) -> Value {
            throw TemplateError(a.args.empty() ? std::string() : a.args[0].str());
          }));
    g.set("strftime_now", Value::callable("strftime_now", [](CallArgs& a) {
            a.check("strftime_now", 1, {});
            if (a.args.empty() || !a.args[0].is_string()) {
              throw TemplateError("strftime_now expects a format string");
            }
            std::time_t now = std::time(nullptr);
            std::tm local{};
            localtime_r(&now, &local);
            char buf[512];
            size_t n = std::strftime(buf, sizeof(buf), a.args[0].as_string().c_str(), &local);
            return Value(std::string(buf, n));
          }));
    g.set("joiner", Value::callable("joiner", [](CallArgs& a) {
            a.check("joiner", 1, {"sep"});
            std::string sep = a.get_or(0, "sep", Value(", ")).str();
            auto used = std::make_shared<bool>(false);
            return Value::callable("joiner", [sep, used](CallArgs&) {
              if (!*used) {
                *used = true;
                return Value("");
              }
              return Value(sep);
            });
          }));
    g.set("cycler", Value::callable("cycler", [](CallArgs& a) {
            if (a.args.empty()) throw TemplateError("at least one item has to be provided");
            return Value::object(std::make_shared<CyclerObject>(a.args));
          }));
  }

  Flow exec_body(const Body& body, Scope* scope, std::string& out) {
    for (const auto& stmt : body) {
      Flow flow = exec(*stmt, scope, out);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  Flow exec(const Stmt& s, Scope* scope, std::string& out) {
    try {
      return exec_inner(s, scope, out);
    } catch (TemplateError& e) {
      if (e.line() == 0) e.set_line(s.line);
      throw;
    }
  }

  void assign(const Target& t, Value value, Scope* scope) {
    if (!t.attribute.empty()) {
      const Value* ns = scope->find(t.names[0]);
      if (!ns || !ns->is_namespace()) {
        throw TemplateError("cannot assign attribute on non-namespace object");
      }
      ns->mutable_dict().set(Value(t.attribute), std::move(value));
      return;
    }
    if (!t.is_tuple) {
      scope->set(t.names[0], std::move(value));
      return;
    }
    ValueList items = iterate(value);
    if (items.size() != t.names.size()) {
      throw TemplateError(
          items.size() > t.names.size()
              ? fmt::format("too many values to unpack (expected {})", t.names.size())
              : fmt::format("not enough values to unpack (expected {}, got {})", t.names.size(),
                            items.size()));
    }
    for (size_t i = 0; i < items.size(); ++i) scope->set(t.names[i], items[i]);
  }

  Value make_macro(const std::string& name, const std::vector<MacroParam>* params, const Body* body,
                   Scope* closure) {
    return Value::callable(name, [this, name, params, body, closure](CallArgs& a) {
      if (macro_depth_ >= kMaxMacroDepth) {
        throw TemplateError(fmt::format("macro '{}': maximum recursion depth exceeded", name));
      }
      ++macro_depth_;
      struct Unwind {
        int& depth;
        ~Unwind() { --depth; }
      } unwind{macro_depth_};
      Scope* s = new_scope(closure);
      if (a.args.size() > params->size()) {
        throw TemplateError(
            fmt::format("macro '{}' takes not more than {} argument(s)", name, params->size()));
      }
      for (const auto& [k, v] : a.kwargs) {
        bool known = k == "caller";
        for (const auto& p : *params) known = known || p.name == k;
        if (!known) {
          throw TemplateError(fmt::format("macro '{}' takes no keyword argument '{}'", name, k));
        }
        if (k == "caller") s->set("caller", v);
      }
      for (size_t i = 0; i < params->size(); ++i) {
        const MacroParam& p = (*params)[i];
        const Value* given = a.get(i, p.name);
        if (given) {
          s->set(p.name, *given);
        } else if (p.default_value) {
          s->set(p.name, eval(*p.default_value, s));
        } else {
          s->set(p.name, Value::undefined(fmt::format("parameter '{}' was not provided", p.name)));
        }
      }
      std::string out;
      exec_body(*body, s, out);
      return Value(std::move(out));
    });
  }

  Value apply_filter_chain(const Expr& chain, Value input, Scope* scope) {
    const Value* saved = filter_input_;
    filter_input_ = &input;
    Value result = eval(chain, scope);
    filter_input_ = saved;
    return result;
  }

  Flow exec_inner(const Stmt& s, Scope* scope, std::string& out) {
    switch (s.kind) {
      case StmtKind::kText:
        out += s.text;
        return Flow::kNormal;
      case StmtKind::kOutput:
        out += eval(*s.expr, scope).str();
        return Flow::kNormal;
      case StmtKind::kIf:
        for (size_t i = 0; i < s.conditions.size(); ++i) {
          if (eval(*s.conditions[i], scope).truthy()) return exec_body(s.bodies[i], scope, out);
        }
        if (s.bodies.size() > s.conditions.size()) return exec_body(s.bodies.back(), scope, out);
        return Flow::kNormal;
      case StmtKind::kFor:
        exec_for(s, scope, out);
        return Flow::kNormal;
      case StmtKind::kSet:
        assign(s.target, eval(*s.expr, scope), scope);
        return Flow::kNormal;
      case StmtKind::kSetBlock: {
        std::string captured;
        exec_body(s.bodies[0], new_scope(scope), captured);
        Value value(std::move(captured));
        if (s.filter) value = apply_filter_chain(*s.filter, value, scope);
        assign(s.target, value, scope);
        return Flow::kNormal;
      }
      case StmtKind::kMacro:
        scope->set(s.text, make_macro(s.text, &s.params, &s.bodies[0], scope));
        return Flow::kNormal;
      case StmtKind::kCallBlock: {
        Value caller = make_macro("caller", &s.params, &s.bodies[0], scope);
        out += eval_call(*s.expr, scope, &caller).str();
        return Flow::kNormal;
      }
      case StmtKind::kFilterBlock: {
        std::string captured;
        exec_body(s.bodies[0], new_scope(scope), captured);
        out += apply_filter_chain(*s.expr, Value(std::move(captured)), scope).str();
        return Flow::kNormal;
      }
      case StmtKind::kWith: {
        Scope* inner = new_scope(scope);
        for (const auto& [name, expr] : s.assignments) inner->set(name, eval(*expr, scope));
        return exec_body(s.bodies[0], inner, out);
      }
      case StmtKind::kBreak:
        return Flow::kBreak;
      case StmtKind::kContinue:
        return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  void exec_for(const Stmt& s, Scope* scope, std::string& out) {
    Value iterable = eval(*s.expr, scope);
    ValueList items = iterate(iterable);
    if (s.filter) {
      ValueList kept;
      for (auto& item : items) {
        Scope* probe = new_scope(scope);
        assign(s.target, item, probe);
        if (eval(*s.filter, probe).truthy()) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      if (s.bodies.size() > 1) exec_body(s.bodies[1], new_scope(scope), out);
      return;
    }
    auto loop = std::make_shared<LoopObject>(items);
    Value loop_value = Value::object(loop);
    for (size_t i = 0; i < items.size(); ++i) {
      Scope* iteration = new_scope(scope);
      assign(s.target, items[i], iteration);
      loop->set_index(i);
      iteration->set("loop", loop_value);
      if (exec_body(s.bodies[0], iteration, out) == Flow::kBreak) break;
    }
  }

  Value eval(const Expr& e, Scope* scope) {
    try {
      return eval_inner(e, scope);
    } catch (TemplateError& err) {
      if (err.line() == 0) err.set_line(e.line);
      throw;
    }
  }

  std::optional<int64_t> slice_bound(const ExprPtr& e, Scope* scope) {
    if (!e) return std::nullopt;
    Value v = eval(*e, scope);
    if (v.is_none()) return std::nullopt;
    if (!v.is_int() && !v.is_bool()) {
      v.require_defined();
      throw TemplateError("slice indices must be integers or None");
    }
    return v.to_int();
  }

  CallArgs eval_args(const Expr& e, size_t first, Scope* scope) {
    CallArgs a;
    for (size_t i = first; i < e.children.size(); ++i)
      a.args.push_back(eval(*e.children[i], scope));
    for (const auto& [k, v] : e.kwargs) a.kwargs.emplace_back(k, eval(*v, scope));
    return a;
  }

  Value eval_call(const Expr& e, Scope* scope, const Value* caller) {
    Value callee = eval(*e.children[0], scope);
    CallArgs a = eval_args(e, 1, scope);
    if (caller) a.kwargs.emplace_back("caller", *caller);
    if (callee.is_undefined()) callee.fail_undefined();
    if (!callee.is_callable()) {
      throw TemplateError(fmt::format("'{}' object is not callable", callee.type_name()));
    }
    return callee.callable_ref().fn(a);
  }

  bool compare(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return a.equals(b);
    if (op == "!=") return !a.equals(b);
    if (op == "in") return contains(b, a);
    if (op == "notin") return !contains(b, a);
    a.require_defined();
    b.require_defined();
    if (op == "<") return a.less_than(b);
    if (op == ">") return b.less_than(a);
    if (op == "<=") return a.less_than(b) || a.equals(b);
    return b.less_than(a) || a.equals(b);  // >=
  }

  Value eval_inner(const Expr& e, Scope* scope) {
    switch (e.kind) {
      case ExprKind::kConst:
        return e.value;
      case ExprKind::kName: {
        const Value* v = scope->find(e.name);
        return v ? *v : Value::undefined(fmt::format("'{}' is undefined", e.name));
      }
      case ExprKind::kList:
      case ExprKind::kTuple: {
        ValueList items;
        for (const auto& c : e.children) items.push_back(eval(*c, scope));
        return e.kind == ExprKind::kList ? Value::list(std::move(items))
                                         : Value::tuple(std::move(items));
      }
      case ExprKind::kDict: {
        Value d = Value::dict();
        for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
          Value k = eval(*e.children[i], scope);
          if (k.is_sequence() && k.is_list()) throw TemplateError("unhashable type: 'list'");
          if (k.is_dict()) throw TemplateError("unhashable type: 'dict'");
          d.mutable_dict().set(k, eval(*e.children[i + 1], scope));
        }
        return d;
      }
      case ExprKind::kGetAttr:
        return get_attr(eval(*e.children[0], scope), e.name);
      case ExprKind::kGetItem: {
        Value obj = eval(*e.children[0], scope);
        const Expr& index = *e.children[1];
        if (index.kind == ExprKind::kSlice) {
          auto start = slice_bound(index.children[0], scope);
          auto stop = slice_bound(index.children[1], scope);
          auto step = slice_bound(index.children[2], scope);
          return slice(obj, start, stop, step);
        }
        return get_item(obj, eval(index, scope));
      }
      case ExprKind::kSlice:
        throw TemplateError("slice outside of a subscript");
      case ExprKind::kCall:
        return eval_call(e, scope, nullptr);
      case ExprKind::kFilter: {
        Value base = e.children[0] ? eval(*e.children[0], scope) : *filter_input_;
        FilterFn filter = find_filter(e.name);
        if (!filter) throw TemplateError(fmt::format("No filter named '{}'.", e.name));
        CallArgs a = eval_args(e, 1, scope);
        return filter(base, a);
      }
      case ExprKind::kTest: {
        Value base = eval(*e.children[0], scope);
        TestFn test = find_test(e.name);
        if (!test) throw TemplateError(fmt::format("No test named '{}'.", e.name));
        CallArgs a = eval_args(e, 1, scope);
        return Value(test(base, a) != e.flag);
      }
      case ExprKind::kNeg:
        return negate(eval(*e.children[0], scope));
      case ExprKind::kPos: {
        Value v = eval(*e.children[0], scope);
        v.require_defined();
        if (!v.is_number()) {
          throw TemplateError(fmt::format("bad operand type for unary +: '{}'", v.type_name()));
        }
        return v.is_bool() ? Value(v.to_int()) : v;
      }
      case ExprKind::kNot:
        return Value(!eval(*e.children[0], scope).truthy());
      case ExprKind::kBinary:
        return binary_op(e.name, eval(*e.children[0], scope), eval(*e.children[1], scope));
      case ExprKind::kAnd: {
        Value left = eval(*e.children[0], scope);
        return left.truthy() ? eval(*e.children[1], scope) : left;
      }
      case ExprKind::kOr: {
        Value left = eval(*e.children[0], scope);
        return left.truthy() ? left : eval(*e.children[1], scope);
      }
      case ExprKind::kConcat: {
        std::string out;
        for (const auto& c : e.children) out += eval(*c, scope).str();
        return Value(std::move(out));
      }
      case ExprKind::kCompare: {
        Value left = eval(*e.children[0], scope);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.children[i + 1], scope);
          if (!compare(e.ops[i], left, right)) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case ExprKind::kCondition:
        if (eval(*e.children[0], scope).truthy()) return eval(*e.children[1], scope);
        if (e.children[2]) return eval(*e.children[2], scope);
        return Value::undefined(fmt::format(
            "the inline if-expression on line {} evaluated to false and no else section was "
            "defined.",
            e.line));
    }
    return Value::undefined();
  }

  std::deque<Scope> scopes_;
  const Value* filter_input_ = nullptr;
  int macro_depth_ = 0;
};

void check_expr(const Expr* e, bool soft) {
  if (!e) return;
  bool inner_soft = soft || e->kind == ExprKind::kCondition;
  if (!inner_soft) {
    if (e->kind == ExprKind::kFilter && !find_filter(e->name)) {
      throw TemplateError(fmt::format("No filter named '{}'.", e->name), e->line);
    }
    if (e->kind == ExprKind::kTest && !find_test(e->name)) {
      throw TemplateError(fmt::format("No test named '{}'.", e->name), e->line);
    }
  }
  for (const auto& c : e->children) check_expr(c.get(), inner_soft);
  for (const auto& [k, v] : e->kwargs) check_expr(v.get(), inner_soft);
}

void check_body(const Body& body, bool soft) {
  for (const auto& s : body) {
    bool is_if = s->kind == StmtKind::kIf;
    check_expr(s->expr.get(), soft);
    check_expr(s->filter.get(), s->kind == StmtKind::kFor ? false : soft);
    for (const auto& c : s->conditions) check_expr(c.get(), soft || is_if);
    for (const auto& p : s->params) check_expr(p.default_value.get(), false);
    for (const auto& [k, v] : s->assignments) check_expr(v.get(), soft);
    // jinja2: if-bodies share the (soft) frame; loops, macros and blocks open a fresh frame.
    for (const auto& b : s->bodies) check_body(b, is_if ? true : false);
  }
}

}  // namespace

void check_filters_and_tests(const Body& body) {
  check_body(body, false);
}

std::string render(const Body& body, const std::vector<std::pair<std::string, Value>>& variables) {
  return Interpreter().run(body, variables);
}

}  // namespace pagoda::jinja
