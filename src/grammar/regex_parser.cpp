// Recursive-descent regex parser over code points, producing the grammar IR directly.
#include "grammar/regex_parser.h"

#include <optional>
#include <string>
#include <vector>

#include "grammar/grammar_error.h"
#include "grammar/pcre2_syntax.h"

namespace pagoda::grammar {
namespace {

constexpr int kMaxRepeat = 10000;

std::vector<CodePointRange> digit_ranges() {
  return {{'0', '9'}};
}
std::vector<CodePointRange> word_ranges() {
  return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
}
// ECMAScript's WhiteSpace and LineTerminator characters.
std::vector<CodePointRange> space_ranges() {
  return {{'\t', '\r'},     {' ', ' '},       {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
          {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
}
std::vector<CodePointRange> dot_ranges() {
  return complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}});
}

class RegexParser {
 public:
  RegexParser(std::string_view pattern, const RegexOptions& options) : options_(options) {
    // Decode the pattern into code points, remembering byte offsets for messages.
    size_t i = 0;
    while (i < pattern.size()) {
      const auto b = static_cast<unsigned char>(pattern[i]);
      size_t len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
      if (len == 0 || i + len > pattern.size()) fail_at(i, "invalid UTF-8");
      char32_t cp = len == 1 ? b : b & (0x7F >> len);
      for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (pattern[i + k] & 0x3F);
      chars_.push_back(cp);
      offsets_.push_back(i);
      i += len;
    }
    offsets_.push_back(pattern.size());
  }

  ParsedRegex parse() {
    ParsedRegex out;
    if (peek('^')) {
      ++pos_;
      out.anchored_start = true;
    }
    out.expr = parse_alternation();
    if (pos_ < chars_.size() && chars_[pos_] == '$') {
      ++pos_;
      out.anchored_end = true;
    }
    if (pos_ < chars_.size()) {
      fail(chars_[pos_] == ')' ? "unmatched ')'" : "'$' or '^' in the middle of the pattern");
    }
    return out;
  }

 private:
  [[noreturn]] void fail_at(size_t byte_offset, std::string_view what) const {
    grammar_fail("regex at offset {}: {}", byte_offset, what);
  }
  [[noreturn]] void fail(std::string_view what) const { fail_at(offsets_[pos_], what); }
  bool peek(char32_t c) const { return pos_ < chars_.size() && chars_[pos_] == c; }
  bool at_end() const { return pos_ >= chars_.size(); }
  char32_t next() {
    if (at_end()) fail("unexpected end of pattern");
    return chars_[pos_++];
  }

  ExprPtr parse_alternation() {
    std::vector<ExprPtr> options{parse_concatenation()};
    while (peek('|')) {
      ++pos_;
      options.push_back(parse_concatenation());
    }
    return choice(std::move(options));
  }

  ExprPtr parse_concatenation() {
    std::vector<ExprPtr> items;
    while (!at_end() && !peek('|') && !peek(')')) {
      // A trailing $ ends the pattern; parse() checks that nothing follows it.
      if (peek('$') && pos_ + 1 == chars_.size()) break;
      items.push_back(parse_quantified());
    }
    return sequence(std::move(items));
  }

  ExprPtr parse_quantified() {
    ExprPtr atom = parse_atom();
    while (!at_end()) {
      int lo = 0;
      int hi = Expr::kUnbounded;
      const size_t start = pos_;
      const char32_t c = chars_[pos_];
      if (c == '*') {
        ++pos_;
      } else if (c == '+') {
        ++pos_;
        lo = 1;
      } else if (c == '?') {
        ++pos_;
        hi = 1;
      } else if (c == '{' && parse_braces(lo, hi)) {
      } else {
        break;
      }
      if (peek('?')) ++pos_;  // lazy: same language
      if (hi != Expr::kUnbounded && hi < lo) {
        pos_ = start;
        fail("quantifier range out of order");
      }
      atom = repeat(atom, lo, hi);
    }
    return atom;
  }

  // {n}, {n,}, {n,m}; false (position unchanged) when the brace is a literal, as in ECMAScript's
  // Annex B.
  bool parse_braces(int& lo, int& hi) {
    const size_t start = pos_;
    ++pos_;
    auto number = [&](int& out) {
      const size_t begin = pos_;
      long long v = 0;
      while (!at_end() && chars_[pos_] >= '0' && chars_[pos_] <= '9') {
        v = v * 10 + (chars_[pos_++] - '0');
        if (v > kMaxRepeat) fail("repetition count too large (the limit is 10000)");
      }
      out = static_cast<int>(v);
      return pos_ > begin;
    };
    if (!number(lo)) {
      pos_ = start;
      return false;
    }
    hi = lo;
    if (peek(',')) {
      ++pos_;
      if (!number(hi)) hi = Expr::kUnbounded;
    }
    if (!peek('}')) {
      pos_ = start;
      return false;
    }
    ++pos_;
    return true;
  }

  ExprPtr parse_atom() {
    const char32_t c = next();
    switch (c) {
      case '(': {
        if (peek('?')) {
          ++pos_;
          const char32_t kind = next();
          if (kind == '<' && !peek('=') && !peek('!')) {
            while (next() != '>') {
            }
          } else if (kind != ':') {
            --pos_;
            fail("lookaround assertions are not supported");
          }
        }
        ExprPtr inner = parse_alternation();
        if (!peek(')')) fail("missing ')'");
        ++pos_;
        return inner;
      }
      case '[':
        return parse_class();
      case '.':
        return regex_char_class(dot_ranges(), options_);
      case '\\':
        return parse_escape_atom();
      case '*':
      case '+':
      case '?':
        --pos_;
        fail("nothing to repeat");
      case '^':
      case '$':
        --pos_;
        fail("anchors are only supported at the start and the end of the pattern");
      default:
        return regex_char_class({{c, c}}, options_);
    }
  }

  ExprPtr parse_escape_atom() {
    std::vector<CodePointRange> ranges;
    if (parse_class_escape(ranges, /*in_class=*/false)) return regex_char_class(ranges, options_);
    const char32_t c = chars_[pos_ - 1];
    if (c >= '1' && c <= '9') {
      --pos_;
      fail("backreferences are not supported");
    }
    --pos_;
    fail("word boundaries (\\b, \\B) are not supported");
  }

  // After a backslash: fills `ranges` and returns true for character escapes and classes;
  // returns false for \b \B and backreferences outside classes.
  bool parse_class_escape(std::vector<CodePointRange>& ranges, bool in_class) {
    const char32_t c = next();
    auto single = [&](char32_t cp) {
      ranges.push_back({cp, cp});
      return true;
    };
    auto add = [&](const std::vector<CodePointRange>& r) {
      ranges.insert(ranges.end(), r.begin(), r.end());
      return true;
    };
    switch (c) {
      case 'd':
        return add(digit_ranges());
      case 'D':
        return add(complement(digit_ranges()));
      case 'w':
        return add(word_ranges());
      case 'W':
        return add(complement(word_ranges()));
      case 's':
        return add(space_ranges());
      case 'S':
        return add(complement(space_ranges()));
      case 't':
        return single('\t');
      case 'n':
        return single('\n');
      case 'r':
        return single('\r');
      case 'f':
        return single('\f');
      case 'v':
        return single('\v');
      case '0':
        return single(0);
      case 'b':
        if (in_class) return single('\b');
        return false;
      case 'B':
        return false;
      case 'x':
        return single(parse_hex(2));
      case 'u':
        if (peek('{')) {
          ++pos_;
          char32_t v = 0;
          int digits = 0;
          while (!peek('}')) {
            v = v * 16 + hex_value(next());
            if (++digits > 6 || v > kMaxCodePoint) fail("\\u{...} escape out of range");
          }
          ++pos_;
          return single(v);
        }
        return single(parse_hex(4));
      default:
        if (c >= '1' && c <= '9') return false;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
          --pos_;
          fail("unknown escape");
        }
        return single(c);  // an escaped punctuation character stands for itself
    }
  }

  char32_t hex_value(char32_t c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    --pos_;
    fail("expected a hexadecimal digit");
  }
  char32_t parse_hex(int digits) {
    char32_t v = 0;
    for (int i = 0; i < digits; ++i) v = v * 16 + hex_value(next());
    return v;
  }

  ExprPtr parse_class() {
    bool negated = false;
    if (peek('^')) {
      ++pos_;
      negated = true;
    }
    std::vector<CodePointRange> ranges;
    while (true) {
      if (at_end()) fail("missing ']'");
      if (peek(']')) {
        ++pos_;
        break;
      }
      // One class atom: a single character (which may start a range) or a class escape.
      std::vector<CodePointRange> atom;
      const char32_t c = next();
      if (c == '\\') {
        if (!parse_class_escape(atom, /*in_class=*/true)) {
          --pos_;
          fail("backreferences are not supported");
        }
      } else {
        atom.push_back({c, c});
      }
      const bool is_single = atom.size() == 1 && atom[0].first == atom[0].last;
      if (is_single && peek('-') && pos_ + 1 < chars_.size() && chars_[pos_ + 1] != ']') {
        ++pos_;
        std::vector<CodePointRange> end_atom;
        const char32_t e = next();
        if (e == '\\') {
          if (!parse_class_escape(end_atom, true)) fail("bad range end");
        } else {
          end_atom.push_back({e, e});
        }
        if (end_atom.size() != 1 || end_atom[0].first != end_atom[0].last) {
          fail("a class escape cannot end a range");
        }
        if (end_atom[0].first < atom[0].first) fail("character class range out of order");
        ranges.push_back({atom[0].first, end_atom[0].first});
        continue;
      }
      ranges.insert(ranges.end(), atom.begin(), atom.end());
    }
    if (negated) ranges = complement(ranges);
    return regex_char_class(ranges, options_);
  }

  RegexOptions options_;
  std::vector<char32_t> chars_;
  std::vector<size_t> offsets_;
  size_t pos_ = 0;
};

}  // namespace

// Inside a JSON string the characters that must be escaped appear as their escapes. The escapes
// share their backslash (one branch, not one per character): a class sits inside repetitions,
// and every branch would be copied at each repetition boundary of the automaton.
ExprPtr regex_char_class(const std::vector<CodePointRange>& ranges, const RegexOptions& options) {
  if (!options.json_string) return utf8_class(ranges);
  static constexpr char kHex[] = "0123456789abcdef";
  ByteSet letters;        // \" \\ \b \t \n \f \r
  ByteSet low_digits[2];  // \u00XY: Y per X in {0, 1}
  std::vector<CodePointRange> safe;
  for (const auto& r : normalize(ranges)) {
    for (char32_t cp = r.first; cp <= r.last && cp < 0x20; ++cp) {
      static constexpr char kShort[] = {'b', 't', 'n', 0, 'f', 'r'};
      if (cp >= 8 && cp <= 13 && kShort[cp - 8]) {
        letters.insert(static_cast<uint8_t>(kShort[cp - 8]));
      } else {
        low_digits[cp >> 4].insert(static_cast<uint8_t>(kHex[cp & 15]));
      }
    }
    if (r.first <= '"' && '"' <= r.last) letters.insert('"');
    if (r.first <= '\\' && '\\' <= r.last) letters.insert('\\');
    for (const auto& allowed : complement({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}})) {
      const char32_t lo = std::max(r.first, allowed.first);
      const char32_t hi = std::min(r.last, allowed.last);
      if (lo <= hi) safe.push_back({lo, hi});
    }
  }
  std::vector<ExprPtr> escapes;
  if (!letters.empty()) escapes.push_back(bytes(letters));
  std::vector<ExprPtr> unicode_escapes;
  for (int high = 0; high < 2; ++high) {
    if (!low_digits[high].empty()) {
      unicode_escapes.push_back(
          sequence({literal(high == 0 ? "0" : "1"), bytes(low_digits[high])}));
    }
  }
  if (!unicode_escapes.empty()) {
    escapes.push_back(sequence({literal("u00"), choice(std::move(unicode_escapes))}));
  }
  std::vector<ExprPtr> out;
  if (!safe.empty()) out.push_back(utf8_class(safe));
  if (!escapes.empty()) out.push_back(sequence({literal("\\"), choice(std::move(escapes))}));
  return choice(std::move(out));
}

ParsedRegex parse_regex(std::string_view pattern, const RegexOptions& options) {
  ParsedRegex parsed = RegexParser(pattern, options).parse();
  if (std::optional<std::string> error = pcre2_syntax_error(pattern)) {
    grammar_fail("regex: {}", *error);
  }
  return parsed;
}

Grammar regex_grammar(std::string_view pattern) {
  Grammar grammar;
  grammar.add_rule("root", parse_regex(pattern).expr);
  return grammar;
}

}  // namespace pagoda::grammar
