// Jinja lexer (see lexer.h). Mirrors jinja2/lexer.py: newline normalisation and removal of one
// trailing newline (keep_trailing_newline=False), `-`/`+` whitespace control, trim_blocks after
// `%}` and `#}`, lstrip_blocks before `{%` and `{#`, raw blocks, and brace balancing so that `}}`
// inside a dict literal does not end a tag.
#include "template/lexer.h"

#include <cctype>
#include <string_view>

#include <fmt/format.h>

#include "template/text.h"
#include "template/value.h"

namespace pagoda::jinja {
namespace {

bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// Python str.splitlines() joined with "\n", minus one trailing newline.
std::string normalize_newlines(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(source[i]);
    if (c == '\r') {
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      out += '\n';
    } else if (c == '\n' || c == '\v' || c == '\f' || c == 0x1C || c == 0x1D || c == 0x1E) {
      out += '\n';
    } else if (c == 0xC2 && i + 1 < source.size() &&
               static_cast<unsigned char>(source[i + 1]) == 0x85) {
      out += '\n';
      ++i;
    } else if (c == 0xE2 && i + 2 < source.size() &&
               static_cast<unsigned char>(source[i + 1]) == 0x80 &&
               (static_cast<unsigned char>(source[i + 2]) == 0xA8 ||
                static_cast<unsigned char>(source[i + 2]) == 0xA9)) {
      out += '\n';
      i += 2;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Python str.rstrip() (Unicode whitespace).
std::string rstrip_python(const std::string& s) {
  std::u32string cps = text::decode(s);
  size_t end = cps.size();
  while (end > 0 && text::is_space(cps[end - 1])) --end;
  if (end == cps.size()) return s;
  return text::encode(std::u32string_view(cps).substr(0, end));
}

bool all_space(const std::string& s) {
  if (s.empty()) return false;
  for (char32_t c : text::decode(s)) {
    if (!text::is_space(c)) return false;
  }
  return true;
}

int count_newlines(std::string_view s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Python's "unicode-escape" decoding of a string literal body.
std::string decode_string_literal(std::string_view body, int line) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out += c;
      continue;
    }
    char e = body[++i];
    switch (e) {
      case '\n':
        break;
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'v':
        out += '\v';
        break;
      case 'x':
      case 'u':
      case 'U': {
        size_t num_digits = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
        uint32_t code = 0;
        for (size_t k = 0; k < num_digits; ++k) {
          int h = i + 1 + k < body.size() ? hex_value(body[i + 1 + k]) : -1;
          if (h < 0) {
            throw TemplateError(fmt::format("truncated \\{} escape in string literal", e), line);
          }
          code = code * 16 + static_cast<uint32_t>(h);
        }
        i += num_digits;
        if (code > 0x10FFFF) throw TemplateError("illegal Unicode character in string", line);
        text::append_utf8(out, static_cast<char32_t>(code));
        break;
      }
      case 'N':
        throw TemplateError("\\N{...} escapes are not supported in string literals", line);
      default:
        if (e >= '0' && e <= '7') {
          uint32_t code = static_cast<uint32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
               ++k) {
            code = code * 8 + static_cast<uint32_t>(body[++i] - '0');
          }
          text::append_utf8(out, static_cast<char32_t>(code));
        } else {
          out += '\\';
          out += e;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  Lexer(const std::string& source, const LexerOptions& options)
      : src_(normalize_newlines(source)), options_(options) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      size_t start = find_tag_start(pos_);
      if (start == std::string::npos) {
        emit_text(src_.substr(pos_));
        pos_ = src_.size();
        break;
      }
      std::string text = src_.substr(pos_, start - pos_);
      char kind = src_[start + 1];  // '{', '%' or '#'
      char sign = start + 2 < src_.size() ? src_[start + 2] : '\0';
      int text_newlines = count_newlines(text);
      if (sign == '-') {
        text = rstrip_python(text);
      } else if (sign != '+' && options_.lstrip_blocks && kind != '{') {
        text = lstrip_line(text);
      }
      emit_text(text);
      line_ += text_newlines;
      pos_ = start + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (kind == '#') {
        lex_comment();
      } else if (kind == '%' && try_raw(start)) {
        // handled
      } else {
        lex_tag(kind == '%');
      }
    }
    tokens_.push_back({TokenType::kEnd, "", line_});
    return std::move(tokens_);
  }

 private:
  size_t find_tag_start(size_t from) const {
    size_t i = src_.find('{', from);
    while (i != std::string::npos && i + 1 < src_.size()) {
      char n = src_[i + 1];
      if (n == '{' || n == '%' || n == '#') return i;
      i = src_.find('{', i + 1);
    }
    return std::string::npos;
  }

  // lstrip_blocks: drop spaces between the start of the line and a block/comment tag.
  std::string lstrip_line(const std::string& text) const {
    size_t nl = text.rfind('\n');
    size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    if ((l_pos > 0 || line_starting_) && all_space(text.substr(l_pos))) {
      return text.substr(0, l_pos);
    }
    return text;
  }

  void emit_text(const std::string& text) {
    if (!text.empty()) tokens_.push_back({TokenType::kText, text, line_});
  }

  // Consumes a tag end whose first char is at pos_; sets line_starting_ from what it consumed.
  void consume_end(size_t marker_len, bool strip_after, bool trim_newline) {
    size_t begin = pos_;
    pos_ += marker_len;
    if (strip_after) {
      while (pos_ < src_.size() && is_ascii_space(src_[pos_])) ++pos_;
    } else if (trim_newline && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
    }
    line_ += count_newlines(std::string_view(src_).substr(begin, pos_ - begin));
    line_starting_ = src_[pos_ - 1] == '\n';
  }

  void lex_comment() {
    size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) throw TemplateError("missing end of comment tag", line_);
    bool minus = end > pos_ && src_[end - 1] == '-';
    bool plus = end > pos_ && src_[end - 1] == '+';
    size_t marker = (minus || plus) ? end - 1 : end;
    line_ += count_newlines(std::string_view(src_).substr(pos_, marker - pos_));
    pos_ = marker;
    consume_end(end + 2 - marker, minus, !minus && !plus && options_.trim_blocks);
  }

  static bool match_word(const std::string& s, size_t& i, const char* word) {
    size_t j = i;
    while (j < s.size() && is_ascii_space(s[j])) ++j;
    size_t n = std::char_traits<char>::length(word);
    if (s.compare(j, n, word) != 0) return false;
    j += n;
    if (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) {
      return false;
    }
    while (j < s.size() && is_ascii_space(s[j])) ++j;
    i = j;
    return true;
  }

  // {% raw %}...{% endraw %}: the body is literal text.
  bool try_raw(size_t tag_start) {
    size_t i = pos_;
    if (!match_word(src_, i, "raw")) return false;
    bool minus_end = src_.compare(i, 3, "-%}") == 0;
    if (!minus_end && src_.compare(i, 2, "%}") != 0) return false;
    line_ += count_newlines(std::string_view(src_).substr(pos_, i - pos_));
    pos_ = i;
    consume_end(minus_end ? 3 : 2, minus_end, false);
    // Find {%[-+]? endraw ... %}
    size_t search = pos_;
    while (true) {
      size_t open = src_.find("{%", search);
      if (open == std::string::npos) throw TemplateError("missing end of raw directive", line_);
      size_t j = open + 2;
      char sign = j < src_.size() ? src_[j] : '\0';
      if (sign == '-' || sign == '+') ++j;
      if (!match_word(src_, j, "endraw")) {
        search = open + 2;
        continue;
      }
      bool end_plus = src_.compare(j, 3, "+%}") == 0;
      bool end_minus = src_.compare(j, 3, "-%}") == 0;
      if (!end_plus && !end_minus && src_.compare(j, 2, "%}") != 0) {
        throw TemplateError("expected end of raw directive", line_);
      }
      std::string body = src_.substr(pos_, open - pos_);
      int body_newlines = count_newlines(body);
      if (sign == '-') {
        body = rstrip_python(body);
      } else if (sign != '+' && options_.lstrip_blocks) {
        body = lstrip_line(body);
      }
      emit_text(body);
      line_ += body_newlines + count_newlines(std::string_view(src_).substr(open, j - open));
      pos_ = j;
      consume_end(end_plus || end_minus ? 3 : 2, end_minus,
                  !end_plus && !end_minus && options_.trim_blocks);
      return true;
    }
  }

  void lex_tag(bool block) {
    tokens_.push_back({block ? TokenType::kBlockBegin : TokenType::kVariableBegin, "", line_});
    std::vector<char> balance;
    while (true) {
      if (pos_ >= src_.size()) {
        throw TemplateError(
            fmt::format("unexpected end of template, expected '{}'",
                        block ? "end of statement block" : "end of print statement"),
            line_);
      }
      if (balance.empty() && try_tag_end(block)) return;
      char c = src_[pos_];
      if (is_ascii_space(c)) {
        if (c == '\n') ++line_;
        ++pos_;
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(c))) {
        lex_number();
        continue;
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t j = pos_;
        while (j < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[j])) || src_[j] == '_')) {
          ++j;
        }
        tokens_.push_back({TokenType::kName, src_.substr(pos_, j - pos_), line_});
        pos_ = j;
        continue;
      }
      if (c == '\'' || c == '"') {
        lex_string(c);
        continue;
      }
      lex_operator(balance);
    }
  }

  bool try_tag_end(bool block) {
    if (block) {
      if (src_.compare(pos_, 3, "+%}") == 0) {
        tokens_.push_back({TokenType::kBlockEnd, "", line_});
        consume_end(3, false, false);
        return true;
      }
      if (src_.compare(pos_, 3, "-%}") == 0) {
        tokens_.push_back({TokenType::kBlockEnd, "", line_});
        consume_end(3, true, false);
        return true;
      }
      if (src_.compare(pos_, 2, "%}") == 0) {
        tokens_.push_back({TokenType::kBlockEnd, "", line_});
        consume_end(2, false, options_.trim_blocks);
        return true;
      }
      return false;
    }
    if (src_.compare(pos_, 3, "-}}") == 0) {
      tokens_.push_back({TokenType::kVariableEnd, "", line_});
      consume_end(3, true, false);
      return true;
    }
    if (src_.compare(pos_, 2, "}}") == 0) {
      tokens_.push_back({TokenType::kVariableEnd, "", line_});
      consume_end(2, false, false);
      return true;
    }
    return false;
  }

  size_t scan_digits(size_t j) const {
    // (\d+_)*\d+ starting at j; returns j if none.
    size_t k = j;
    while (k < src_.size() && std::isdigit(static_cast<unsigned char>(src_[k]))) {
      ++k;
      if (k + 1 < src_.size() && src_[k] == '_' &&
          std::isdigit(static_cast<unsigned char>(src_[k + 1]))) {
        ++k;
      }
    }
    return k;
  }

  void lex_number() {
    size_t int_end = scan_digits(pos_);
    size_t j = int_end;
    bool is_float = false;
    if (j + 1 < src_.size() && src_[j] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[j + 1])) &&
        !(pos_ > 0 && src_[pos_ - 1] == '.')) {
      j = scan_digits(j + 1);
      is_float = true;
    }
    if (j < src_.size() && (src_[j] == 'e' || src_[j] == 'E') &&
        !(pos_ > 0 && src_[pos_ - 1] == '.')) {
      size_t k = j + 1;
      if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
      size_t e_end = scan_digits(k);
      if (e_end > k) {
        j = e_end;
        is_float = true;
      }
    }
    if (!is_float) {
      if (src_[pos_] == '0' && pos_ + 1 < src_.size() &&
          std::string_view("bBoOxX").find(src_[pos_ + 1]) != std::string_view::npos) {
        throw TemplateError("binary, octal and hex integer literals are not supported", line_);
      }
      j = int_end;
    }
    std::string literal;
    for (size_t k = pos_; k < j; ++k) {
      if (src_[k] != '_') literal += src_[k];
    }
    tokens_.push_back({is_float ? TokenType::kFloat : TokenType::kInteger, literal, line_});
    pos_ = j;
  }

  void lex_string(char quote) {
    size_t j = pos_ + 1;
    while (j < src_.size() && src_[j] != quote) {
      if (src_[j] == '\\') ++j;
      ++j;
    }
    if (j >= src_.size()) throw TemplateError("unexpected end of string literal", line_);
    std::string_view body = std::string_view(src_).substr(pos_ + 1, j - pos_ - 1);
    tokens_.push_back({TokenType::kString, decode_string_literal(body, line_), line_});
    line_ += count_newlines(body);
    pos_ = j + 1;
  }

  void lex_operator(std::vector<char>& balance) {
    static const char* const kTwoCharOps[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : kTwoCharOps) {
      if (src_.compare(pos_, 2, op) == 0) {
        tokens_.push_back({TokenType::kOperator, op, line_});
        pos_ += 2;
        return;
      }
    }
    char c = src_[pos_];
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
      throw TemplateError(fmt::format("unexpected char '{}' at {}", c, pos_), line_);
    }
    if (c == '(' || c == '[' || c == '{') {
      balance.push_back(c == '(' ? ')' : (c == '[' ? ']' : '}'));
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance.empty()) throw TemplateError(fmt::format("unexpected '{}'", c), line_);
      if (balance.back() != c) {
        throw TemplateError(fmt::format("unexpected '{}', expected '{}'", c, balance.back()),
                            line_);
      }
      balance.pop_back();
    }
    tokens_.push_back({TokenType::kOperator, std::string(1, c), line_});
    ++pos_;
  }

  std::string src_;
  LexerOptions options_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source, const LexerOptions& options) {
  return Lexer(source, options).run();
}

}  // namespace pagoda::jinja
