// Constructors of the grammar IR and the code-point-class to UTF-8 expansion.
#include "grammar/grammar.h"

#include <algorithm>

namespace pagoda::grammar {

ExprPtr bytes(const ByteSet& set) {
  auto e = std::make_shared<Expr>();
  e->kind = Expr::Kind::kBytes;
  e->bytes = set;
  return e;
}

ExprPtr sequence(std::vector<ExprPtr> items) {
  if (items.size() == 1) return items[0];
  auto e = std::make_shared<Expr>();
  e->kind = Expr::Kind::kSequence;
  e->children = std::move(items);
  return e;
}

ExprPtr choice(std::vector<ExprPtr> options) {
  if (options.size() == 1) return options[0];
  auto e = std::make_shared<Expr>();
  e->kind = Expr::Kind::kChoice;
  e->children = std::move(options);
  return e;
}

ExprPtr repeat(ExprPtr item, int min_count, int max_count) {
  auto e = std::make_shared<Expr>();
  e->kind = Expr::Kind::kRepeat;
  e->children = {std::move(item)};
  e->min_count = min_count;
  e->max_count = max_count;
  return e;
}

ExprPtr optional(ExprPtr item) {
  return repeat(std::move(item), 0, 1);
}
ExprPtr star(ExprPtr item) {
  return repeat(std::move(item), 0, Expr::kUnbounded);
}

ExprPtr rule_ref(int rule_id) {
  auto e = std::make_shared<Expr>();
  e->kind = Expr::Kind::kRuleRef;
  e->rule_id = rule_id;
  return e;
}

ExprPtr epsilon() {
  return sequence({});
}

ExprPtr literal(std::string_view text) {
  std::vector<ExprPtr> items;
  items.reserve(text.size());
  for (char c : text) items.push_back(bytes(ByteSet::single(static_cast<uint8_t>(c))));
  return sequence(std::move(items));
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::vector<CodePointRange> normalize(std::vector<CodePointRange> ranges) {
  std::sort(ranges.begin(), ranges.end(),
            [](const CodePointRange& a, const CodePointRange& b) { return a.first < b.first; });
  std::vector<CodePointRange> merged;
  for (const auto& r : ranges) {
    if (r.first > r.last) continue;
    if (!merged.empty() && r.first <= merged.back().last + 1) {
      merged.back().last = std::max(merged.back().last, r.last);
    } else {
      merged.push_back(r);
    }
  }
  return merged;
}

std::vector<CodePointRange> complement(std::vector<CodePointRange> ranges) {
  std::vector<CodePointRange> out;
  char32_t next = 0;
  for (const auto& r : normalize(std::move(ranges))) {
    if (r.first > next) out.push_back({next, r.first - 1});
    next = r.last + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return out;
}

namespace {

// Encodings of one length: U+0000..7F, ..7FF, ..FFFF, ..10FFFF.
constexpr char32_t kLengthEnd[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};

// Byte sequences for all code points in [first, last], which encode to the same length `n`.
// Classic split (as in RE2 and Rust's utf8-ranges): when first and last differ only in the
// trailing k continuation bytes and those span the full 0x80..0xBF range, one sequence of byte
// ranges covers them; otherwise split at the boundary of the leading byte.
void add_same_length(char32_t first, char32_t last, int n, std::vector<std::vector<ByteSet>>& out) {
  for (int k = 1; k < n; ++k) {
    const char32_t mask = (char32_t{1} << (6 * k)) - 1;
    if ((first & ~mask) != (last & ~mask)) {
      if ((first & mask) != 0) {
        add_same_length(first, first | mask, n, out);
        add_same_length((first | mask) + 1, last, n, out);
        return;
      }
      if ((last & mask) != mask) {
        add_same_length(first, (last & ~mask) - 1, n, out);
        add_same_length(last & ~mask, last, n, out);
        return;
      }
    }
  }
  std::string lo;
  std::string hi;
  append_utf8(lo, first);
  append_utf8(hi, last);
  std::vector<ByteSet> seq;
  for (size_t i = 0; i < lo.size(); ++i) {
    seq.push_back(ByteSet::range(static_cast<uint8_t>(lo[i]), static_cast<uint8_t>(hi[i])));
  }
  out.push_back(std::move(seq));
}

}  // namespace

ExprPtr utf8_class(std::vector<CodePointRange> ranges) {
  std::vector<CodePointRange> pieces;
  for (const auto& r : normalize(std::move(ranges))) {
    // Surrogates are not scalar values; cut them out.
    if (r.last < 0xD800 || r.first > 0xDFFF) {
      pieces.push_back(r);
      continue;
    }
    if (r.first < 0xD800) pieces.push_back({r.first, 0xD7FF});
    if (r.last > 0xDFFF) pieces.push_back({0xE000, r.last});
  }
  std::vector<std::vector<ByteSet>> multibyte;
  ByteSet ascii;
  for (auto r : pieces) {
    r.last = std::min(r.last, kMaxCodePoint);
    for (int n = 0; n < 4 && r.first <= r.last; ++n) {
      if (r.first > kLengthEnd[n]) continue;
      const char32_t end = std::min(r.last, kLengthEnd[n]);
      if (n == 0) {
        ascii.insert_range(static_cast<uint8_t>(r.first), static_cast<uint8_t>(end));
      } else {
        add_same_length(r.first, end, n + 1, multibyte);
      }
      r.first = end + 1;
    }
  }
  // Sequences that end in the same byte set share that last edge, so the class has few exits
  // (a class inside a repetition is copied at every boundary, once per exit).
  std::vector<ExprPtr> options;
  if (!ascii.empty()) options.push_back(bytes(ascii));
  std::vector<bool> used(multibyte.size(), false);
  for (size_t i = 0; i < multibyte.size(); ++i) {
    if (used[i]) continue;
    std::vector<ExprPtr> prefixes;
    for (size_t j = i; j < multibyte.size(); ++j) {
      if (used[j] || !(multibyte[j].back() == multibyte[i].back())) continue;
      used[j] = true;
      std::vector<ExprPtr> prefix;
      for (size_t k = 0; k + 1 < multibyte[j].size(); ++k) prefix.push_back(bytes(multibyte[j][k]));
      prefixes.push_back(sequence(std::move(prefix)));
    }
    options.push_back(sequence({choice(std::move(prefixes)), bytes(multibyte[i].back())}));
  }
  return choice(std::move(options));
}

int Grammar::add_rule(std::string name) {
  names_.push_back(std::move(name));
  bodies_.push_back(nullptr);
  return num_rules() - 1;
}

void Grammar::set_body(int rule_id, ExprPtr body) {
  bodies_[rule_id] = std::move(body);
}

int Grammar::add_rule(std::string name, ExprPtr body) {
  const int id = add_rule(std::move(name));
  set_body(id, std::move(body));
  return id;
}

int Grammar::find_rule(std::string_view name) const {
  for (int i = 0; i < num_rules(); ++i) {
    if (names_[i] == name) return i;
  }
  return -1;
}

}  // namespace pagoda::grammar
