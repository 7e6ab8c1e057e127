// Digit-by-digit construction of numeral ranges (the way regex range generators do it: split by
// length, then by the first digit where the bounds differ).
#include "grammar/number_range.h"

#include <string>
#include <vector>

namespace pagoda::grammar {
namespace {

ExprPtr digits(char lo, char hi) {
  return bytes(ByteSet::range(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)));
}

// Digit strings of lo.size() characters between lo and hi inclusive (equal lengths, lo <= hi).
ExprPtr same_length(const std::string& lo, const std::string& hi) {
  if (lo.empty()) return epsilon();
  const std::string lo_rest = lo.substr(1);
  const std::string hi_rest = hi.substr(1);
  if (lo[0] == hi[0]) return sequence({literal(lo.substr(0, 1)), same_length(lo_rest, hi_rest)});
  const bool lo_rest_min = lo_rest.find_first_not_of('0') == std::string::npos;
  const bool hi_rest_max = hi_rest.find_first_not_of('9') == std::string::npos;
  const ExprPtr any_rest =
      repeat(digits('0', '9'), static_cast<int>(lo_rest.size()), static_cast<int>(lo_rest.size()));
  std::vector<ExprPtr> options;
  char mid_lo = static_cast<char>(lo[0] + 1);
  char mid_hi = static_cast<char>(hi[0] - 1);
  if (lo_rest_min) {
    mid_lo = lo[0];
  } else {
    options.push_back(sequence(
        {literal(lo.substr(0, 1)), same_length(lo_rest, std::string(lo_rest.size(), '9'))}));
  }
  if (hi_rest_max) mid_hi = hi[0];
  if (mid_lo <= mid_hi) options.push_back(sequence({digits(mid_lo, mid_hi), any_rest}));
  if (!hi_rest_max) {
    options.push_back(sequence(
        {literal(hi.substr(0, 1)), same_length(std::string(hi_rest.size(), '0'), hi_rest)}));
  }
  return choice(std::move(options));
}

// Non-negative integers in [a, b] (b optional) in canonical form.
ExprPtr natural_range(int64_t a, std::optional<int64_t> b) {
  if (b && *b < a) return choice({});
  const std::string sa = std::to_string(a);
  const size_t max_len = b ? std::to_string(*b).size() : sa.size();
  std::vector<ExprPtr> options;
  for (size_t len = sa.size(); len <= max_len; ++len) {
    std::string lo = sa;
    if (len != sa.size()) {
      lo.assign(len, '0');
      lo[0] = '1';
    }
    const std::string hi = (b && len == max_len) ? std::to_string(*b) : std::string(len, '9');
    options.push_back(same_length(lo, hi));
  }
  if (!b) {
    // Every longer numeral.
    options.push_back(
        sequence({digits('1', '9'),
                  repeat(digits('0', '9'), static_cast<int>(sa.size()), Expr::kUnbounded)}));
  }
  return choice(std::move(options));
}

ExprPtr digit_run() {
  return repeat(digits('0', '9'), 1, Expr::kUnbounded);
}

// Non-negative decimals N[.F] with the value in (a or [a ... b] or b) or b), integer bounds.
ExprPtr nonnegative_decimal(int64_t a, bool a_exclusive, std::optional<int64_t> b,
                            bool b_exclusive) {
  const ExprPtr any_fraction = optional(sequence({literal("."), digit_run()}));
  const ExprPtr zero_fraction =
      optional(sequence({literal("."), repeat(literal("0"), 1, Expr::kUnbounded)}));
  const ExprPtr nonzero_fraction =
      sequence({literal("."), star(digits('0', '9')), digits('1', '9'), star(digits('0', '9'))});
  std::vector<ExprPtr> options;
  // Integer parts strictly inside: any fraction.
  const int64_t inner_lo = a_exclusive ? a + 1 : a;
  const std::optional<int64_t> inner_hi = b ? std::optional<int64_t>(*b - 1) : std::nullopt;
  if (!inner_hi || inner_lo <= *inner_hi) {
    options.push_back(sequence({natural_range(inner_lo, inner_hi), any_fraction}));
  }
  // a itself, excluded: only a.F with F not all zeros (below a+1 <= b when b > a).
  if (a_exclusive && (!b || a < *b)) {
    options.push_back(sequence({literal(std::to_string(a)), nonzero_fraction}));
  }
  // b itself, included: only b or b.000.
  if (b && !b_exclusive && (*b > a || (*b == a && !a_exclusive))) {
    options.push_back(sequence({literal(std::to_string(*b)), zero_fraction}));
  }
  return choice(std::move(options));
}

}  // namespace

ExprPtr integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  std::vector<ExprPtr> options;
  // Negative numbers: "-" and a magnitude in [max(1, -hi), -lo].
  if (!lo || *lo < 0) {
    const int64_t min_magnitude = (hi && *hi < 0) ? -*hi : 1;
    const std::optional<int64_t> max_magnitude = lo ? std::optional<int64_t>(-*lo) : std::nullopt;
    if (!max_magnitude || min_magnitude <= *max_magnitude) {
      options.push_back(sequence({literal("-"), natural_range(min_magnitude, max_magnitude)}));
    }
  }
  if (!hi || *hi >= 0) {
    const int64_t a = (lo && *lo > 0) ? *lo : 0;
    if (!hi || a <= *hi) options.push_back(natural_range(a, hi));
  }
  return choice(std::move(options));
}

ExprPtr number_range(std::optional<NumberBound> lo, std::optional<NumberBound> hi) {
  std::vector<ExprPtr> options;
  // x >= 0 (the numeral has no sign).
  if (!hi || hi->value > 0 || (hi->value == 0 && !hi->exclusive)) {
    const bool lo_nonnegative = lo && lo->value >= 0;
    options.push_back(nonnegative_decimal(
        lo_nonnegative ? lo->value : 0, lo_nonnegative && lo->exclusive,
        hi ? std::optional<int64_t>(hi->value) : std::nullopt, hi && hi->exclusive));
  }
  // x < 0: "-" and a magnitude y > 0 with -hi <= y (when hi < 0) and y <= -lo.
  if (!lo || lo->value < 0) {
    const bool hi_negative = hi && hi->value < 0;
    options.push_back(sequence(
        {literal("-"),
         nonnegative_decimal(hi_negative ? -hi->value : 0, hi_negative ? hi->exclusive : true,
                             lo ? std::optional<int64_t>(-lo->value) : std::nullopt,
                             lo && lo->exclusive)}));
  }
  return choice(std::move(options));
}

}  // namespace pagoda::grammar
