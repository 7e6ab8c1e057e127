// Jinja parser (see parser.h). Function names follow jinja2/parser.py so the two can be read side
// by side: parse_tuple, parse_condexpr, parse_or, ..., parse_unary, parse_primary, parse_postfix,
// parse_filter_expr.
#include "template/parser.h"

#include <fmt/format.h>

#include "template/lexer.h"

namespace pagoda::jinja {
namespace {

std::string describe(const Token& t) {
  switch (t.type) {
    case TokenType::kEnd:
      return "end of template";
    case TokenType::kBlockEnd:
      return "end of statement block";
    case TokenType::kVariableEnd:
      return "end of print statement";
    case TokenType::kText:
      return "template data";
    case TokenType::kString:
      return "string";
    default:
      return "'" + t.value + "'";
  }
}

// Nesting limit for expressions and blocks, so hostile input cannot overflow the stack (CPython's
// jinja2 would stop at its recursion limit too).
constexpr int kMaxNesting = 1000;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Body parse_all() {
    std::string found;
    Body body = parse_body({}, &found);
    if (cur().type != TokenType::kEnd) fail(fmt::format("unexpected {}", describe(cur())));
    return body;
  }

 private:
  const Token& cur() const { return tokens_[pos_]; }
  const Token& peek(size_t n = 1) const { return tokens_[std::min(pos_ + n, tokens_.size() - 1)]; }
  void advance() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  [[noreturn]] void fail(const std::string& message) const {
    throw TemplateError(message, cur().line);
  }
  bool is_op(const char* op) const {
    return cur().type == TokenType::kOperator && cur().value == op;
  }
  bool is_name(const char* name) const {
    return cur().type == TokenType::kName && cur().value == name;
  }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    advance();
    return true;
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(fmt::format("expected token '{}', got {}", op, describe(cur())));
  }
  std::string expect_name() {
    if (cur().type != TokenType::kName) {
      fail(fmt::format("expected token 'name', got {}", describe(cur())));
    }
    std::string name = cur().value;
    advance();
    return name;
  }
  void expect_block_end() {
    if (cur().type != TokenType::kBlockEnd) {
      fail(fmt::format("expected token 'end of statement block', got {}", describe(cur())));
    }
    advance();
  }

  // Counts nesting while alive; throws past kMaxNesting.
  class DepthGuard {
   public:
    explicit DepthGuard(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxNesting) p_.fail("template nesting too deep");
    }
    ~DepthGuard() { --p_.depth_; }

   private:
    Parser& p_;
  };

  // For left-associative chains (a + b + c, x|f|g, a.b.c): each step nests the tree one level.
  class ChainGuard {
   public:
    explicit ChainGuard(Parser& p) : p_(p) {}
    void step() {
      ++steps_;
      if (++p_.depth_ > kMaxNesting) p_.fail("template nesting too deep");
    }
    ~ChainGuard() { p_.depth_ -= steps_; }

   private:
    Parser& p_;
    int steps_ = 0;
  };

  ExprPtr make(ExprKind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // ---- statements ----

  // Parses until `{% tag` with tag in end_tags (left positioned at the tag name).
  Body parse_body(std::initializer_list<const char*> end_tags, std::string* found) {
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == TokenType::kEnd) {
        if (end_tags.size() != 0) {
          std::string names;
          for (const char* tag : end_tags)
            names += (names.empty() ? "'" : " or '") + std::string(tag) + "'";
          fail(
              fmt::format("Unexpected end of template. Jinja was looking for the following "
                          "tags: {}.",
                          names));
        }
        return body;
      }
      if (t.type == TokenType::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kText;
        s->line = t.line;
        s->text = t.value;
        body.push_back(std::move(s));
        advance();
      } else if (t.type == TokenType::kVariableBegin) {
        advance();
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kOutput;
        s->line = t.line;
        s->expr = parse_tuple(false, true, {});
        if (cur().type != TokenType::kVariableEnd) {
          fail(fmt::format("expected token 'end of print statement', got {}", describe(cur())));
        }
        advance();
        body.push_back(std::move(s));
      } else if (t.type == TokenType::kBlockBegin) {
        advance();
        if (cur().type != TokenType::kName) fail("tag name expected");
        for (const char* tag : end_tags) {
          if (cur().value == tag) {
            *found = tag;
            return body;
          }
        }
        body.push_back(parse_statement());
      } else {
        fail(fmt::format("unexpected {}", describe(t)));
      }
    }
  }

  // After an end tag name: consume it and the block end.
  void finish_end_tag() {
    advance();
    expect_block_end();
  }

  StmtPtr parse_statement() {
    DepthGuard guard(*this);
    int line = cur().line;
    std::string tag = cur().value;
    auto s = std::make_unique<Stmt>();
    s->line = line;
    advance();
    std::string found;
    if (tag == "if") {
      s->kind = StmtKind::kIf;
      s->conditions.push_back(parse_tuple(false, false, {}));
      expect_block_end();
      while (true) {
        s->bodies.push_back(parse_body({"elif", "else", "endif"}, &found));
        if (found == "elif") {
          advance();
          s->conditions.push_back(parse_tuple(false, false, {}));
          expect_block_end();
        } else if (found == "else") {
          finish_end_tag();
          s->bodies.push_back(parse_body({"endif"}, &found));
          finish_end_tag();
          break;
        } else {
          finish_end_tag();
          break;
        }
      }
    } else if (tag == "for") {
      s->kind = StmtKind::kFor;
      s->target = parse_assign_target(false, {"in"});
      if (!skip_name("in")) fail(fmt::format("expected token 'in', got {}", describe(cur())));
      s->expr = parse_tuple(false, false, {"recursive"});
      if (skip_name("if")) s->filter = parse_expression(true);
      if (is_name("recursive")) fail("recursive for loops are not supported");
      expect_block_end();
      ++loop_depth_;
      s->bodies.push_back(parse_body({"endfor", "else"}, &found));
      --loop_depth_;
      if (found == "else") {
        finish_end_tag();
        s->bodies.push_back(parse_body({"endfor"}, &found));
      }
      finish_end_tag();
    } else if (tag == "set") {
      s->target = parse_assign_target(true, {});
      if (skip_op("=")) {
        s->kind = StmtKind::kSet;
        s->expr = parse_tuple(false, true, {});
        expect_block_end();
      } else {
        s->kind = StmtKind::kSetBlock;
        if (s->target.is_tuple) fail("can't assign a block to a tuple");
        if (is_op("|")) {
          s->filter = parse_filter(nullptr, false);
        }
        expect_block_end();
        s->bodies.push_back(parse_body({"endset"}, &found));
        finish_end_tag();
      }
    } else if (tag == "macro") {
      s->kind = StmtKind::kMacro;
      s->text = expect_name();
      parse_signature(s->params);
      expect_block_end();
      int saved_depth = loop_depth_;
      loop_depth_ = 0;
      s->bodies.push_back(parse_body({"endmacro"}, &found));
      loop_depth_ = saved_depth;
      finish_end_tag();
    } else if (tag == "call") {
      s->kind = StmtKind::kCallBlock;
      if (is_op("(")) parse_signature(s->params);
      s->expr = parse_expression(true);
      if (s->expr->kind != ExprKind::kCall) fail("expected call");
      expect_block_end();
      int saved_depth = loop_depth_;
      loop_depth_ = 0;
      s->bodies.push_back(parse_body({"endcall"}, &found));
      loop_depth_ = saved_depth;
      finish_end_tag();
    } else if (tag == "filter") {
      s->kind = StmtKind::kFilterBlock;
      s->expr = parse_filter(nullptr, true);
      expect_block_end();
      s->bodies.push_back(parse_body({"endfilter"}, &found));
      finish_end_tag();
    } else if (tag == "with") {
      s->kind = StmtKind::kWith;
      while (cur().type != TokenType::kBlockEnd) {
        if (!s->assignments.empty()) expect_op(",");
        std::string name = expect_name();
        expect_op("=");
        s->assignments.emplace_back(name, parse_expression(true));
      }
      expect_block_end();
      s->bodies.push_back(parse_body({"endwith"}, &found));
      finish_end_tag();
    } else if (tag == "generation") {
      // Hugging Face's AssistantTracker extension: renders its body (in its own scope).
      s->kind = StmtKind::kWith;
      expect_block_end();
      s->bodies.push_back(parse_body({"endgeneration"}, &found));
      finish_end_tag();
    } else if (tag == "print") {
      s->kind = StmtKind::kOutput;
      s->expr = parse_tuple(false, true, {});
      expect_block_end();
    } else if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail(fmt::format("'{}' outside of a for loop", tag));
      s->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
      expect_block_end();
    } else if (tag == "extends" || tag == "include" || tag == "import" || tag == "from" ||
               tag == "block" || tag == "autoescape" || tag == "do" || tag == "trans") {
      throw TemplateError(fmt::format("the '{}' statement is not supported in chat templates", tag),
                          line);
    } else {
      throw TemplateError(fmt::format("Encountered unknown tag '{}'.", tag), line);
    }
    return s;
  }

  void parse_signature(std::vector<MacroParam>& params) {
    expect_op("(");
    bool have_default = false;
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      MacroParam p;
      p.name = expect_name();
      if (skip_op("=")) {
        p.default_value = parse_expression(true);
        have_default = true;
      } else if (have_default) {
        fail("non-default argument follows default argument");
      }
      params.push_back(std::move(p));
    }
    expect_op(")");
  }

  Target parse_assign_target(bool with_namespace, std::initializer_list<const char*> end_names) {
    Target t;
    if (with_namespace && cur().type == TokenType::kName && peek().type == TokenType::kOperator &&
        peek().value == ".") {
      t.names.push_back(expect_name());
      advance();
      t.attribute = expect_name();
      return t;
    }
    while (true) {
      if (!t.names.empty()) expect_op(",");
      bool end = cur().type == TokenType::kBlockEnd || is_op(")") || is_op("=");
      for (const char* n : end_names) end = end || is_name(n);
      if (end) break;
      if (cur().type != TokenType::kName) {
        fail(fmt::format("can't assign to {}", describe(cur())));
      }
      std::string name = cur().value;
      if (name == "true" || name == "false" || name == "none" || name == "True" ||
          name == "False" || name == "None") {
        fail(fmt::format("can't assign to constant '{}'", name));
      }
      t.names.push_back(name);
      advance();
      if (is_op(",")) {
        t.is_tuple = true;
      } else {
        break;
      }
    }
    if (t.names.empty()) fail("expected an assignment target");
    return t;
  }

  // ---- expressions ----

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  bool is_tuple_end(std::initializer_list<const char*> extra_end) const {
    if (cur().type == TokenType::kVariableEnd || cur().type == TokenType::kBlockEnd || is_op(")")) {
      return true;
    }
    for (const char* n : extra_end) {
      if (is_name(n)) return true;
    }
    return false;
  }

  ExprPtr parse_tuple(bool explicit_parentheses, bool with_condexpr,
                      std::initializer_list<const char*> extra_end) {
    int line = cur().line;
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      args.push_back(parse_expression(with_condexpr));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parentheses) {
        fail(fmt::format("Expected an expression, got {}", describe(cur())));
      }
    }
    auto e = make(ExprKind::kTuple, line);
    e->children = std::move(args);
    return e;
  }

  ExprPtr parse_condexpr() {
    int line = cur().line;
    ExprPtr expr1 = parse_or();
    ChainGuard chain(*this);
    while (skip_name("if")) {
      chain.step();
      ExprPtr expr2 = parse_or();
      ExprPtr expr3;
      if (skip_name("else")) expr3 = parse_expression(true);
      auto e = make(ExprKind::kCondition, line);
      e->children.push_back(std::move(expr2));
      e->children.push_back(std::move(expr1));
      e->children.push_back(std::move(expr3));
      expr1 = std::move(e);
    }
    return expr1;
  }

  ExprPtr binary(ExprKind kind, ExprPtr left, ExprPtr right, int line, std::string op = {}) {
    auto e = make(kind, line);
    e->name = std::move(op);
    e->children.push_back(std::move(left));
    e->children.push_back(std::move(right));
    return e;
  }

  ExprPtr parse_or() {
    int line = cur().line;
    ExprPtr left = parse_and();
    ChainGuard chain(*this);
    while (skip_name("or")) {
      chain.step();
      left = binary(ExprKind::kOr, std::move(left), parse_and(), line);
    }
    return left;
  }

  ExprPtr parse_and() {
    int line = cur().line;
    ExprPtr left = parse_not();
    ChainGuard chain(*this);
    while (skip_name("and")) {
      chain.step();
      left = binary(ExprKind::kAnd, std::move(left), parse_not(), line);
    }
    return left;
  }

  ExprPtr parse_not() {
    DepthGuard guard(*this);
    int line = cur().line;
    if (skip_name("not")) {
      auto e = make(ExprKind::kNot, line);
      e->children.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    int line = cur().line;
    ExprPtr first = parse_math1();
    std::vector<std::string> ops;
    std::vector<ExprPtr> operands;
    while (true) {
      if (cur().type == TokenType::kOperator &&
          (cur().value == "==" || cur().value == "!=" || cur().value == "<" ||
           cur().value == "<=" || cur().value == ">" || cur().value == ">=")) {
        ops.push_back(cur().value);
        advance();
      } else if (skip_name("in")) {
        ops.push_back("in");
      } else if (is_name("not") && peek().type == TokenType::kName && peek().value == "in") {
        advance();
        advance();
        ops.push_back("notin");
      } else {
        break;
      }
      operands.push_back(parse_math1());
    }
    if (ops.empty()) return first;
    auto e = make(ExprKind::kCompare, line);
    e->children.push_back(std::move(first));
    for (auto& o : operands) e->children.push_back(std::move(o));
    e->ops = std::move(ops);
    return e;
  }

  ExprPtr parse_math1() {
    int line = cur().line;
    ExprPtr left = parse_concat();
    ChainGuard chain(*this);
    while (is_op("+") || is_op("-")) {
      chain.step();
      std::string op = cur().value;
      advance();
      left = binary(ExprKind::kBinary, std::move(left), parse_concat(), line, op);
    }
    return left;
  }

  ExprPtr parse_concat() {
    int line = cur().line;
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto e = make(ExprKind::kConcat, line);
    e->children.push_back(std::move(first));
    while (skip_op("~")) e->children.push_back(parse_math2());
    return e;
  }

  ExprPtr parse_math2() {
    int line = cur().line;
    ExprPtr left = parse_pow();
    ChainGuard chain(*this);
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      chain.step();
      std::string op = cur().value;
      advance();
      left = binary(ExprKind::kBinary, std::move(left), parse_pow(), line, op);
    }
    return left;
  }

  ExprPtr parse_pow() {
    int line = cur().line;
    ExprPtr left = parse_unary(true);
    ChainGuard chain(*this);
    while (skip_op("**")) {
      chain.step();
      left = binary(ExprKind::kBinary, std::move(left), parse_unary(true), line, "**");
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    int line = cur().line;
    ExprPtr node;
    if (skip_op("-")) {
      node = make(ExprKind::kNeg, line);
      node->children.push_back(parse_unary(false));
    } else if (skip_op("+")) {
      node = make(ExprKind::kPos, line);
      node->children.push_back(parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    int line = t.line;
    if (t.type == TokenType::kName) {
      ExprPtr e;
      if (t.value == "true" || t.value == "True" || t.value == "false" || t.value == "False") {
        e = make(ExprKind::kConst, line);
        e->value = Value(t.value == "true" || t.value == "True");
      } else if (t.value == "none" || t.value == "None") {
        e = make(ExprKind::kConst, line);
      } else {
        e = make(ExprKind::kName, line);
        e->name = t.value;
      }
      advance();
      return e;
    }
    if (t.type == TokenType::kString) {
      std::string s;
      while (cur().type == TokenType::kString) {
        s += cur().value;
        advance();
      }
      auto e = make(ExprKind::kConst, line);
      e->value = Value(std::move(s));
      return e;
    }
    if (t.type == TokenType::kInteger) {
      auto e = make(ExprKind::kConst, line);
      try {
        e->value = Value(static_cast<int64_t>(std::stoll(t.value)));
      } catch (const std::out_of_range&) {
        fail("integer literal does not fit in 64 bits");
      }
      advance();
      return e;
    }
    if (t.type == TokenType::kFloat) {
      auto e = make(ExprKind::kConst, line);
      e->value = Value(std::stod(t.value));
      advance();
      return e;
    }
    if (skip_op("(")) {
      ExprPtr e = parse_tuple(true, true, {});
      expect_op(")");
      return e;
    }
    if (skip_op("[")) {
      auto e = make(ExprKind::kList, line);
      while (!is_op("]")) {
        if (!e->children.empty()) expect_op(",");
        if (is_op("]")) break;
        e->children.push_back(parse_expression(true));
      }
      expect_op("]");
      return e;
    }
    if (skip_op("{")) {
      auto e = make(ExprKind::kDict, line);
      while (!is_op("}")) {
        if (!e->children.empty()) expect_op(",");
        if (is_op("}")) break;
        e->children.push_back(parse_expression(true));
        expect_op(":");
        e->children.push_back(parse_expression(true));
      }
      expect_op("}");
      return e;
    }
    fail(fmt::format("unexpected {}", describe(t)));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    ChainGuard chain(*this);
    while (true) {
      chain.step();
      if (is_op(".") || is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    ChainGuard chain(*this);
    while (true) {
      chain.step();
      if (is_op("|")) {
        node = parse_filter(std::move(node), false);
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    int line = cur().line;
    if (skip_op(".")) {
      const Token& attr = cur();
      if (attr.type == TokenType::kName) {
        auto e = make(ExprKind::kGetAttr, line);
        e->name = attr.value;
        e->children.push_back(std::move(node));
        advance();
        return e;
      }
      if (attr.type != TokenType::kInteger) fail("expected name or number");
      auto e = make(ExprKind::kGetItem, line);
      e->children.push_back(std::move(node));
      auto index = make(ExprKind::kConst, line);
      index->value = Value(static_cast<int64_t>(std::stoll(attr.value)));
      e->children.push_back(std::move(index));
      advance();
      return e;
    }
    expect_op("[");
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    auto e = make(ExprKind::kGetItem, line);
    e->children.push_back(std::move(node));
    if (args.size() == 1) {
      e->children.push_back(std::move(args[0]));
    } else {
      auto tuple = make(ExprKind::kTuple, line);
      tuple->children = std::move(args);
      e->children.push_back(std::move(tuple));
    }
    return e;
  }

  ExprPtr parse_subscribed() {
    int line = cur().line;
    std::vector<ExprPtr> args;
    if (skip_op(":")) {
      args.push_back(nullptr);
    } else {
      ExprPtr node = parse_expression(true);
      if (!skip_op(":")) return node;
      args.push_back(std::move(node));
    }
    if (is_op(":") || is_op("]") || is_op(",")) {
      args.push_back(nullptr);
    } else {
      args.push_back(parse_expression(true));
    }
    if (skip_op(":")) {
      args.push_back(is_op("]") || is_op(",") ? nullptr : parse_expression(true));
    } else {
      args.push_back(nullptr);
    }
    auto e = make(ExprKind::kSlice, line);
    e->children = std::move(args);
    return e;
  }

  void parse_call_args(Expr& e) {
    expect_op("(");
    bool require_comma = false;
    while (!is_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are not supported");
      if (cur().type == TokenType::kName && peek().type == TokenType::kOperator &&
          peek().value == "=") {
        std::string key = cur().value;
        advance();
        advance();
        e.kwargs.emplace_back(key, parse_expression(true));
      } else {
        if (!e.kwargs.empty()) fail("invalid syntax for function call expression");
        e.children.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr node) {
    auto e = make(ExprKind::kCall, cur().line);
    e->children.push_back(std::move(node));
    parse_call_args(*e);
    return e;
  }

  ExprPtr parse_filter(ExprPtr node, bool start_inline) {
    ChainGuard chain(*this);
    while (is_op("|") || start_inline) {
      chain.step();
      if (!start_inline) advance();
      int line = cur().line;
      std::string name = expect_name();
      while (skip_op(".")) {
        name += '.';
        name += expect_name();
      }
      auto e = make(ExprKind::kFilter, line);
      e->name = name;
      e->children.push_back(std::move(node));
      if (is_op("(")) parse_call_args(*e);
      node = std::move(e);
      start_inline = false;
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    int line = cur().line;
    advance();  // 'is'
    bool negated = skip_name("not");
    std::string name = expect_name();
    while (skip_op(".")) {
      name += '.';
      name += expect_name();
    }
    auto e = make(ExprKind::kTest, line);
    e->name = name;
    e->flag = negated;
    e->children.push_back(std::move(node));
    if (is_op("(")) {
      parse_call_args(*e);
    } else if ((cur().type == TokenType::kName || cur().type == TokenType::kString ||
                cur().type == TokenType::kInteger || cur().type == TokenType::kFloat ||
                is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail("You cannot chain multiple tests with is");
      e->children.push_back(parse_postfix(parse_primary()));
    }
    return e;
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int loop_depth_ = 0;
  int depth_ = 0;
};

}  // namespace

Body parse_template(const std::string& source) {
  return Parser(tokenize(source)).parse_all();
}

}  // namespace pagoda::jinja
