// The row loops of fast_exp.h, kept out of line so they are compiled with the room's
// -fno-trapping-math (see src/sampling/CMakeLists.txt) and vectorize.
#include "sampling/fast_exp.h"

namespace pagoda {

void exp_shifted(const float* in, float shift, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = exp_approx(in[i] - shift);
}

double sum_floats(const float* values, int64_t n) {
  double acc[4] = {0.0, 0.0, 0.0, 0.0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int lane = 0; lane < 4; ++lane) acc[lane] += values[i + lane];
  }
  for (; i < n; ++i) acc[0] += values[i];
  return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

}  // namespace pagoda
