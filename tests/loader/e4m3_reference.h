// The value of an e4m3fn code as the OCP FP8 specification defines it, computed in double, for
// the FP8 tests to check the loader's table against: (-1)^S * 2^(E - 7) * (1 + M / 8) for E > 0,
// (-1)^S * 2^-6 * (M / 8) for E = 0; S.1111.111 is NaN and there is no infinity.
#pragma once

#include <cmath>
#include <limits>

namespace pagoda::test {

inline double e4m3_definition(int code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double sign = s ? -1.0 : 1.0;
  if (e == 0) return sign * std::pow(2.0, -6) * (m / 8.0);
  return sign * std::pow(2.0, e - 7) * (1.0 + m / 8.0);
}

}  // namespace pagoda::test
