// exp over rows of logits, written so the compiler vectorizes it (libm's expf is a call per
// element and does not vectorize without -ffast-math). The sampler needs exp over the whole
// vocabulary for softmax, log-sum-exp and top-p, up to ~152k per token per sequence.
// Accuracy: within 1e-6 relative of std::exp (tests/sampling/test_fast_exp.cpp), far below what
// sampling or reported logprobs can resolve; inputs below -87 (and -inf) give exactly 0.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

namespace pagoda {

// exp(x) = 2^n * exp(r) with n = round(x / ln 2) and |r| <= ln(2) / 2, exp(r) by its Taylor series
// to r^7 (truncation error (ln2/2)^8 / 8! < 6e-9), 2^n built in the exponent bits.
inline float exp_approx(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;  // ln 2 split so that n * kLn2Hi is exact
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  constexpr float kMin = -87.0f;              // exp(-87) ~ 1.6e-38, still a normal float
  constexpr float kMax = 88.0f;
  const float xc = std::min(std::max(x, kMin), kMax);
  const float n = (xc * kLog2e + kRoundMagic) - kRoundMagic;
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float scale = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return x < kMin ? 0.0f : p * scale;
}

// out[i] = exp_approx(in[i] - shift) for i < n; in and out may be the same row. Defined in
// fast_exp.cpp, which the room compiles with -fno-trapping-math: without it GCC will not turn the
// clamps and the underflow select into vector blends, and the loop stays scalar.
void exp_shifted(const float* in, float shift, float* out, int64_t n);

// Sum in double with four independent accumulators (a fixed order, so deterministic).
double sum_floats(const float* values, int64_t n);

}  // namespace pagoda
