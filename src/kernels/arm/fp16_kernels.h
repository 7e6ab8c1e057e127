// fp16 arithmetic (Armv8.2-A FEAT_FP16: fmla on 8 half-precision lanes) for f16 weights and
// the fp16 KV cache, for the AArch64 files compiled with +fp16 (neon_dotprod.cpp and later).
// The plain NEON table widens f16 to fp32 (fcvtl, exact) and multiplies in fp32: 4 products
// per instruction plus the widening. Here one fmla does 8, with no widening.
//
// Precision, and why the accumulation is split. fp16 has an 11-bit significand (u = 2^-11)
// and a range of ±65504, so:
//   * x (the activations, or the query of the KV dot products) is scaled per token by a power
//     of two 2^-k, exactly, so that its largest magnitude lies in [8, 16), and rounded to fp16
//     once per call (relative error u). The scale keeps products of weights up to |w| = 511 and
//     runs of 8 of them finite, and ordinary values far from fp16's subnormal range.
//   * Each accumulator lane adds at most kF16Run = 8 products in fp16 (fmla rounds once per
//     step, so a run is within 8u of its exact sum), then the run is widened (exact) and added
//     into an fp32 accumulator. An fp16 accumulation over a whole row (2048 columns: 256 steps
//     per lane) would drift by hundreds of u; runs of 8 bound it at 8u while the fp32 flush
//     (2 fcvtl + 2 fadd per 8 lanes) costs one instruction per 16 products.
//   * Hence |result - exact| <= 10 u sum|x w| (x rounding + a run of 8, with slack for the
//     fp32 part) + 2^-25 * 2^k per step where a product or sum falls into fp16's subnormal
//     range (absolute: half its spacing 2^-24, in scaled units). kernel_table_test checks that
//     bound; KernelTable::f16_arithmetic tells the tests (and users) that this table uses it.
//     For comparison, AVX-512's vdpbf16ps rounds x to bf16: 2^-8 per product, 8x larger.
// Every (row, token) pair runs the same operations at the same columns (the run boundaries
// are fixed multiples of 64 columns), so results are batch- and thread-split invariant.
// The value sums over an fp16 cache (axpy_rows, attention_values) are arm/fp16_values.h.
//
// Templates on the vector traits V (ODR rules of simd/simd_kernels.h); only files compiled
// with +fp16 may include this header.
#pragma once

#include <arm_neon.h>

#include <cstdint>

#include "kernels/simd/simd_kernels.h"

namespace pagoda::arm {

constexpr int64_t kF16Lanes = 8;
// fp16 multiply-adds per accumulator lane before the run is added into fp32 (see above).
constexpr int64_t kF16Run = 8;

inline float16x8_t load_f16x8(const uint16_t* p) {
  return vreinterpretq_f16_u16(vld1q_u16(p));
}

// Writes x [n] scaled by a power of two 2^-k and rounded to fp16 into out [padded] (zeros
// past n) and returns 2^k, by which a dot product with the fp16 values is multiplied back.
// The scaled largest magnitude lies in [2^kTopExponent, 2^(kTopExponent + 1)): [8, 16) for
// activations and queries (above), [1/32, 1/16) for the softmax weights of the value sums
// (arm/fp16_values.h). absmax 0, subnormal, inf or NaN: k = 0.
template <class V, int kTopExponent = 3>
float to_f16_scaled(const float* x, int64_t n, int64_t padded, uint16_t* out) {
  float32x4_t m = vdupq_n_f32(0.0f);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) m = vmaxq_f32(m, vabsq_f32(vld1q_f32(x + i)));
  for (; i < n; ++i) m = vmaxq_f32(m, vabsq_f32(vdupq_n_f32(x[i])));
  const uint32_t bits = vgetq_lane_u32(vreinterpretq_u32_f32(vdupq_n_f32(vmaxvq_f32(m))), 0);
  const int exponent = static_cast<int>(bits >> 23);  // biased; absmax in [2^(e-127), 2^(e-126))
  int k = 0;
  if (exponent != 0 && exponent != 255) {
    k = exponent - 127 - kTopExponent;  // absmax * 2^-k in [2^kTopExponent, 2^(kTop + 1))
    k = k < -126 ? -126 : (k > 126 ? 126 : k);
  }
  const float down =
      vgetq_lane_f32(vreinterpretq_f32_u32(vdupq_n_u32(static_cast<uint32_t>(127 - k) << 23)), 0);
  const float up =
      vgetq_lane_f32(vreinterpretq_f32_u32(vdupq_n_u32(static_cast<uint32_t>(127 + k) << 23)), 0);
  const float32x4_t scale = vdupq_n_f32(down);
  i = 0;
  for (; i + 4 <= n; i += 4) {
    vst1_u16(out + i, vreinterpret_u16_f16(vcvt_f16_f32(vmulq_f32(vld1q_f32(x + i), scale))));
  }
  for (; i < padded; i += 4) {
    float block[4] = {};
    for (int j = 0; j < 4 && i + j < n; ++j) block[j] = x[i + j];
    vst1_u16(out + i, vreinterpret_u16_f16(vcvt_f16_f32(vmulq_f32(vld1q_f32(block), scale))));
  }
  return up;
}

// y[t * ldy + r] = up[t] * (row r of w) . (token t of xh) for kRows rows x kTokens tokens.
// Row r starts at w + r * ldw and has n values; token t at xh + t * ldx, zero-padded to a
// multiple of 8. The last partial vector of a row is copied with zeros (a stored 0 times a
// padded 0; reading past the row could meet an inf of the next row).
template <class V, int kRows, int kTokens, bool kPrefetch>
[[gnu::noinline]] void f16_dot_tile(const uint16_t* xh, int64_t ldx, const float* up,
                                    const uint16_t* w, int64_t ldw, int64_t n, float* y,
                                    int64_t ldy) {
  float32x4_t acc[kRows][kTokens];
  float16x8_t run[kRows][kTokens];
  for (int r = 0; r < kRows; ++r) {
    for (int t = 0; t < kTokens; ++t) {
      acc[r][t] = vdupq_n_f32(0.0f);
      run[r][t] = vdupq_n_f16(0.0f);
    }
  }
  const auto flush = [&] {
    for (int r = 0; r < kRows; ++r) {
      for (int t = 0; t < kTokens; ++t) {
        acc[r][t] = vaddq_f32(acc[r][t], vcvt_f32_f16(vget_low_f16(run[r][t])));
        acc[r][t] = vaddq_f32(acc[r][t], vcvt_high_f32_f16(run[r][t]));
        run[r][t] = vdupq_n_f16(0.0f);
      }
    }
  };
  const auto step = [&](const float16x8_t(&wv)[kRows], int64_t c) {
    for (int t = 0; t < kTokens; ++t) {
      const float16x8_t xv = load_f16x8(xh + t * ldx + c);
      for (int r = 0; r < kRows; ++r) run[r][t] = vfmaq_f16(run[r][t], wv[r], xv);
    }
  };
  const int64_t whole = n & ~(kF16Lanes - 1);
  int64_t c = 0;
  while (c < whole) {
    const int64_t run_end = simd::min_i64<V>(c + kF16Run * kF16Lanes, whole);
    if constexpr (kPrefetch) {  // a run is 128 bytes of each row: two lines, 1 KiB ahead
      for (int r = 0; r < kRows; ++r) {
        V::prefetch_l2(w + r * ldw + c + 512);
        V::prefetch_l2(w + r * ldw + c + 544);
      }
    }
    for (; c < run_end; c += kF16Lanes) {
      float16x8_t wv[kRows];
      for (int r = 0; r < kRows; ++r) wv[r] = load_f16x8(w + r * ldw + c);
      step(wv, c);
    }
    flush();
  }
  if (c < n) {
    float16x8_t wv[kRows];
    for (int r = 0; r < kRows; ++r) {
      uint16_t block[kF16Lanes] = {};  // +0 in fp16
      for (int64_t j = 0; c + j < n; ++j) block[j] = w[r * ldw + c + j];
      wv[r] = load_f16x8(block);
    }
    step(wv, c);
    flush();
  }
  for (int r = 0; r < kRows; ++r) {
    for (int t = 0; t < kTokens; ++t) y[t * ldy + r] = vaddvq_f32(acc[r][t]) * up[t];
  }
}

// Scratch for one call's fp16 activations: [num_tokens, padded] values + num_tokens scales.
template <class V>
struct F16Activations {
  const uint16_t* h = nullptr;
  const float* up = nullptr;
  int64_t padded = 0;
};

template <class V, int kTopExponent = 3>
F16Activations<V> f16_activations(const float* x, int64_t num_tokens, int64_t n, int64_t ldx) {
  static thread_local simd::Scratch<V> scratch;
  F16Activations<V> a;
  a.padded = (n + kF16Lanes - 1) & ~(kF16Lanes - 1);
  const int64_t h_bytes = (num_tokens * a.padded * 2 + 63) & ~int64_t{63};
  auto* base = static_cast<char*>(scratch.get(static_cast<size_t>(h_bytes + num_tokens * 4)));
  auto* h = reinterpret_cast<uint16_t*>(base);
  auto* up = reinterpret_cast<float*>(base + h_bytes);
  for (int64_t t = 0; t < num_tokens; ++t) {
    up[t] = to_f16_scaled<V, kTopExponent>(x + t * ldx, n, a.padded, h + t * a.padded);
  }
  a.h = h;
  a.up = up;
  return a;
}

// Tiles of 4 rows x 3 tokens (12 fp16 runs + 12 fp32 accumulators + 4 weight vectors + x:
// 29 of the 32 q registers); decode (one token) streams 4 rows with a prefetch.
constexpr int kF16TileRows = 4;
constexpr int kF16TileTokens = 3;

template <class V>
void matmul_f16_weights(const float* x, int64_t num_tokens, const WeightView& w, int64_t row_begin,
                        int64_t row_end, float* y, int64_t ldy) {
  const int64_t cols = w.cols;
  const F16Activations<V> a = f16_activations<V>(x, num_tokens, cols, cols);
  const auto* wh = static_cast<const uint16_t*>(w.data);
  for (int64_t r = row_begin; r < row_end; r += kF16TileRows) {
    const int64_t rows = simd::min_i64<V>(kF16TileRows, row_end - r);
    for (int64_t t = 0; t < num_tokens; t += kF16TileTokens) {
      simd::with_tile_shape<V, kF16TileRows, kF16TileTokens>(
          rows, simd::min_i64<V>(kF16TileTokens, num_tokens - t), [&]<int R, int T>() {
            f16_dot_tile<V, R, T, (T == 1)>(a.h + t * a.padded, a.padded, a.up + t, wh + r * cols,
                                            cols, cols, y + t * ldy + r, ldy);
          });
    }
  }
}

// The table's matmul: f16 weights here, everything else as the shared templates do it.
template <class V>
void matmul(const float* x, int64_t num_tokens, const WeightView& w, int64_t row_begin,
            int64_t row_end, float* y, int64_t ldy) {
  if (w.dtype == DType::kF16) {
    matmul_f16_weights<V>(x, num_tokens, w, row_begin, row_end, y, ldy);
  } else {
    simd::matmul<V>(x, num_tokens, w, row_begin, row_end, y, ldy);
  }
}

// The attention scores over an fp16 cache block: the query scaled and rounded once per call,
// then 4 rows at a time (one row for the rest: the same operations per row).
template <class V>
void dot_rows(const float* a, const void* rows, DType rows_dtype, int64_t row_stride,
              int64_t num_rows, int64_t n, float* out) {
  if (rows_dtype != DType::kF16) {
    simd::dot_rows<V>(a, rows, rows_dtype, row_stride, num_rows, n, out);
    return;
  }
  const F16Activations<V> q = f16_activations<V>(a, 1, n, n);
  const auto* k = static_cast<const uint16_t*>(rows);
  int64_t j = 0;
  for (; j + 4 <= num_rows; j += 4) {
    f16_dot_tile<V, 4, 1, false>(q.h, q.padded, q.up, k + j * row_stride, row_stride, n, out + j,
                                 1);
  }
  for (; j < num_rows; ++j) {
    f16_dot_tile<V, 1, 1, false>(q.h, q.padded, q.up, k + j * row_stride, row_stride, n, out + j,
                                 1);
  }
}

// Prefill and verify scores over an fp16 cache block: dot_rows above per query row, so that a
// position's score is the one a decode of its token computes (fp16 products, not the shared
// tiles' widened ones); other cache dtypes take the shared tiles.
template <class V>
void attention_scores(const float* q, int64_t ldq, int64_t num_q, const void* rows,
                      DType rows_dtype, int64_t row_stride, int64_t num_rows, int64_t n, float* s,
                      int64_t lds) {
  if (rows_dtype != DType::kF16) {
    simd::attention_scores<V>(q, ldq, num_q, rows, rows_dtype, row_stride, num_rows, n, s, lds);
    return;
  }
  for (int64_t i = 0; i < num_q; ++i) {
    dot_rows<V>(q + i * ldq, rows, rows_dtype, row_stride, num_rows, n, s + i * lds);
  }
}

// The value sums over an fp16 cache block (the softmax-weighted v rows of decode, MLA and the
// prefill tiles): defined in arm/fp16_values.h, included at the end of this file.
template <class V>
void axpy_rows(const float* coeffs, const void* rows, DType rows_dtype, int64_t row_stride,
               int64_t num_rows, int64_t n, float* y);
template <class V>
void attention_values(const float* p, int64_t ldp, int64_t num_q, const float* row_scale,
                      const void* const* blocks, int64_t block_rows, DType rows_dtype,
                      int64_t row_stride, int64_t num_rows, int64_t n, float* acc, int64_t lda);

// The shared table with fp16 arithmetic for f16 weights and fp16 cache rows.
template <class V>
KernelTable with_f16_arithmetic(KernelTable t) {
  t.matmul = matmul<V>;
  t.dot_rows = dot_rows<V>;
  t.axpy_rows = axpy_rows<V>;
  t.attention_scores = attention_scores<V>;
  t.attention_values = attention_values<V>;
  t.f16_arithmetic = true;
  return t;
}

}  // namespace pagoda::arm

#include "kernels/arm/fp16_values.h"  // IWYU pragma: keep
