// Recursive-descent parser for EBNF/GBNF grammars, producing the grammar IR.
#include "grammar/ebnf_parser.h"

#include <map>
#include <vector>

#include "grammar/grammar_error.h"

namespace pagoda::grammar {
namespace {

constexpr int kMaxRepeat = 10000;

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.';
}

class EbnfParser {
 public:
  explicit EbnfParser(std::string_view text) : text_(text) {}

  Grammar parse(std::string_view root_rule) {
    skip_space();
    if (at_end()) fail("the grammar is empty");
    while (!at_end()) {
      const size_t start = pos_;
      const std::string name = parse_name();
      skip_space();
      if (!consume("::=")) {
        pos_ = start;
        fail("expected 'name ::= ...'");
      }
      const int id = rule_id(name);
      if (defined_[id]) {
        pos_ = start;
        fail("rule '" + name + "' is defined twice");
      }
      defined_[id] = true;
      grammar_.set_body(id, parse_alternation());
      skip_space();
    }
    for (const auto& [name, id] : ids_) {
      if (!defined_[id]) {
        pos_ = first_use_[id];
        fail("rule '" + name + "' is used but never defined");
      }
    }
    const int root = grammar_.find_rule(root_rule);
    if (root < 0) grammar_fail("EBNF grammar has no rule named '{}'", root_rule);
    grammar_.set_root(root);
    return std::move(grammar_);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    size_t line = 1;
    size_t column = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    grammar_fail("EBNF line {} column {}: {}", line, column, what);
  }
  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }
  bool consume(std::string_view s) {
    if (text_.substr(pos_, s.size()) != s) return false;
    pos_ += s.size();
    return true;
  }
  void skip_space() {
    while (!at_end()) {
      const char c = text_[pos_];
      if (c == '#') {
        while (!at_end() && text_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else {
        break;
      }
    }
  }

  std::string parse_name() {
    const size_t start = pos_;
    while (!at_end() && is_name_char(text_[pos_])) ++pos_;
    if (pos_ == start) fail("expected a rule name");
    return std::string(text_.substr(start, pos_ - start));
  }

  int rule_id(const std::string& name) {
    auto [it, inserted] = ids_.emplace(name, 0);
    if (inserted) {
      it->second = grammar_.add_rule(name);
      defined_.push_back(false);
      first_use_.push_back(pos_);
    }
    return it->second;
  }

  // True when the text at pos_ is `name ::=` (the start of the next rule).
  bool at_rule_start() const {
    size_t i = pos_;
    while (i < text_.size() && is_name_char(text_[i])) ++i;
    if (i == pos_) return false;
    while (i < text_.size() && (text_[i] == ' ' || text_[i] == '\t')) ++i;
    return text_.substr(i, 3) == "::=";
  }

  ExprPtr parse_alternation() {
    std::vector<ExprPtr> options{parse_sequence()};
    while (peek() == '|') {
      ++pos_;
      options.push_back(parse_sequence());
    }
    return choice(std::move(options));
  }

  ExprPtr parse_sequence() {
    std::vector<ExprPtr> items;
    while (true) {
      skip_space();
      const char c = peek();
      if (at_end() || c == '|' || c == ')' || at_rule_start()) break;
      items.push_back(parse_postfix(parse_primary()));
    }
    return sequence(std::move(items));
  }

  ExprPtr parse_postfix(ExprPtr item) {
    while (true) {
      const char c = peek();
      if (c == '*') {
        ++pos_;
        item = star(item);
      } else if (c == '+') {
        ++pos_;
        item = repeat(item, 1, Expr::kUnbounded);
      } else if (c == '?') {
        ++pos_;
        item = optional(item);
      } else if (c == '{') {
        ++pos_;
        skip_space();
        const int lo = parse_count();
        int hi = lo;
        skip_space();
        if (consume(",")) {
          skip_space();
          hi = peek() == '}' ? Expr::kUnbounded : parse_count();
          skip_space();
        }
        if (!consume("}")) fail("expected '}'");
        if (hi != Expr::kUnbounded && hi < lo) fail("repetition range out of order");
        item = repeat(item, lo, hi);
      } else {
        return item;
      }
    }
  }

  int parse_count() {
    const size_t start = pos_;
    long long v = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = v * 10 + (text_[pos_++] - '0');
      if (v > kMaxRepeat) fail("repetition count too large (the limit is 10000)");
    }
    if (pos_ == start) fail("expected a number");
    return static_cast<int>(v);
  }

  ExprPtr parse_primary() {
    const char c = peek();
    if (c == '"' || c == '\'') return parse_string();
    if (c == '[') return parse_class();
    if (c == '.') {
      ++pos_;
      return utf8_class({{0, kMaxCodePoint}});
    }
    if (c == '(') {
      ++pos_;
      skip_space();
      if (peek() == '=') fail("lookahead assertions are not supported");
      ExprPtr inner = parse_alternation();
      skip_space();
      if (!consume(")")) fail("expected ')'");
      return inner;
    }
    if (is_name_char(c)) {
      return rule_ref(rule_id(parse_name()));
    }
    fail(std::string("unexpected character '") + c + "'");
  }

  char32_t parse_code_point() {
    const auto b = static_cast<unsigned char>(text_[pos_]);
    const size_t len = b < 0x80         ? 1
                       : (b >> 5) == 6  ? 2
                       : (b >> 4) == 14 ? 3
                       : (b >> 3) == 30 ? 4
                                        : 0;
    if (len == 0 || pos_ + len > text_.size()) fail("invalid UTF-8");
    char32_t cp = len == 1 ? b : b & (0x7F >> len);
    for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (text_[pos_ + k] & 0x3F);
    pos_ += len;
    return cp;
  }

  char32_t parse_hex(int digits) {
    char32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char c = peek();
      int d = -1;
      if (c >= '0' && c <= '9') d = c - '0';
      if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
      if (d < 0) fail("expected a hexadecimal digit");
      ++pos_;
      v = v * 16 + d;
    }
    if (v > kMaxCodePoint) fail("code point out of range");
    return v;
  }

  // One character of a string or class, escapes decoded.
  char32_t parse_char() {
    if (at_end()) fail("unterminated string or class");
    if (peek() != '\\') return parse_code_point();
    ++pos_;
    if (at_end()) fail("unterminated escape");
    const char c = text_[pos_++];
    switch (c) {
      case 'n':
        return '\n';
      case 't':
        return '\t';
      case 'r':
        return '\r';
      case 'f':
        return '\f';
      case 'v':
        return '\v';
      case 'b':
        return '\b';
      case '0':
        return 0;
      case 'x':
        return parse_hex(2);
      case 'u':
        return parse_hex(4);
      case 'U':
        return parse_hex(8);
      case '\\':
      case '"':
      case '\'':
      case '[':
      case ']':
      case '-':
      case '^':
      case '/':
        return static_cast<unsigned char>(c);
      default:
        --pos_;
        fail(std::string("unknown escape '\\") + c + "'");
    }
  }

  ExprPtr parse_string() {
    const char quote = text_[pos_++];
    std::string bytes_out;
    while (true) {
      if (at_end()) fail("unterminated string");
      if (peek() == quote) {
        ++pos_;
        break;
      }
      if (peek() == '\n') fail("newline inside a string");
      append_utf8(bytes_out, parse_char());
    }
    return literal(bytes_out);
  }

  ExprPtr parse_class() {
    ++pos_;  // [
    bool negated = false;
    if (peek() == '^') {
      ++pos_;
      negated = true;
    }
    std::vector<CodePointRange> ranges;
    while (true) {
      if (at_end()) fail("unterminated character class");
      if (peek() == ']') {
        ++pos_;
        break;
      }
      const char32_t first = parse_char();
      char32_t last = first;
      if (peek() == '-' && pos_ + 1 < text_.size() && text_[pos_ + 1] != ']') {
        ++pos_;
        last = parse_char();
        if (last < first) fail("character class range out of order");
      }
      ranges.push_back({first, last});
    }
    if (negated) ranges = complement(ranges);
    return utf8_class(ranges);
  }

  std::string_view text_;
  size_t pos_ = 0;
  Grammar grammar_;
  std::map<std::string, int> ids_;
  std::vector<bool> defined_;
  std::vector<size_t> first_use_;
};

}  // namespace

Grammar parse_ebnf(std::string_view text, std::string_view root_rule) {
  return EbnfParser(text).parse(root_rule);
}

}  // namespace pagoda::grammar
