// Decimal numerals with bounds, as grammar IR: integers in [lo, hi] (JSON Schema's minimum and
// maximum on "integer") and non-exponent numbers between integer bounds ("number"). The
// languages are exact: every numeral they produce is in range, and every in-range numeral in
// JSON's canonical digit form (no leading zeros, no "-0") is produced.
#pragma once

#include <cstdint>
#include <optional>

#include "grammar/grammar.h"

namespace pagoda::grammar {

// Bounds beyond this magnitude are rejected by the callers (they would not fit the arithmetic).
inline constexpr int64_t kMaxNumericBound = 1'000'000'000'000'000'000;

// Integers n with lo <= n <= hi (either bound optional). choice({}) when none.
ExprPtr integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi);

struct NumberBound {
  int64_t value;
  bool exclusive;
};
// Decimal numbers (optional fraction, no exponent) between integer-valued bounds.
ExprPtr number_range(std::optional<NumberBound> lo, std::optional<NumberBound> hi);

}  // namespace pagoda::grammar
