// The value sums over an fp16 KV cache in fp16 arithmetic (Armv8.2-A FEAT_FP16), for the
// AArch64 tables with KernelTable::f16_arithmetic: axpy_rows (decode's and MLA's weighted v
// rows) and attention_values (the prefill tiles' P.V). Included at the end of
// arm/fp16_kernels.h, whose with_f16_arithmetic puts them in the table.
//
// The widening path (simd/simd_kernels.h) spends per 4 values of a cache row one fcvtl and one
// fp32 fmla; here one fmla multiplies 8 fp16 values by the row's weight, with no widening.
//
// Precision and range. Each query row's weights (softmax numerators over one cache block,
// or any coefficients) are scaled by a power of two 2^-k, exactly, so that the largest
// magnitude lies in [1/32, 1/16), and rounded to fp16 once per call (relative error u =
// 2^-11). Each lane of the output adds the weighted values of at most kF16Run = 8 cache rows
// in fp16 (within 8 u of the run's exact sum), then the run is widened (exact), multiplied
// back by 2^k (exact) and added into the fp32 output with one fmla. As the scaled weights
// stay below 1/16, a run of 8 stays below half of the largest cache value in magnitude, so
// no finite cache value can overflow fp16 here (unlike the scores, this needs no bound on
// the cache). Hence |result - exact| <= 10 u sum_j |c_j v_j| (with slack for the fp32 part)
// plus half the fp16 subnormal spacing, 2^-25 * 2^k <= 2^-20 * max|c|, per step where a
// scaled weight, product or sum falls below fp16's normal range.
//
// Batch invariance: every output element runs the same operations in the same order whatever
// the number of query rows tiled together, the column chunking or the tail, and the run
// boundaries are fixed multiples of 8 rows from the block's first row, so attention_values on
// one query row gives the bits of the rescale then axpy_rows (the decode path), as the shared
// tiles do. Zero weights (positions a prefill row may not see) add +0 to runs and outputs
// that are never -0, so they change nothing.
#pragma once

#include <arm_neon.h>

#include <algorithm>
#include <cstdint>

#include "kernels/arm/fp16_kernels.h"
#include "kernels/simd/simd_kernels.h"

namespace pagoda::arm {

// The scaled weights' top binade: [2^-5, 2^-4) (see above).
constexpr int kF16WeightTopExponent = -5;

// acc [R rows, C vectors of 8 lanes from column d; when kPartial one vector of m lanes] of
// query rows whose fp16 weights are at wh + r * ldw (num_rows each) and scales at up[r]:
// acc_r = acc_r * row_scale[r] (when row_scale is not null) + sum_j weight_rj * row_j.
// Up to 4 vectors the fp32 accumulators stay in registers across the runs (3 per vector with
// the run: 12 + 4 cache vectors); wider tiles add each run into acc in memory (a load and a
// store per 8 rows), so that 3 x 4 fp16 runs, 4 cache vectors and 3 weights fit in the 32
// registers. Either way each element sees the same operations.
template <class V, int R, int C, bool kPartial>
[[gnu::noinline]] void f16_value_tile(const uint16_t* wh, int64_t ldw, const float* up,
                                      const float* row_scale, const uint16_t* v, int64_t row_stride,
                                      int64_t num_rows, int64_t d, int m, float* acc, int64_t lda) {
  constexpr bool kInRegisters = R * C <= 4;
  const auto at = [&](int r, int c) { return acc + r * lda + d + c * kF16Lanes; };
  const auto load_acc = [&](int r, int c, float32x4_t& lo, float32x4_t& hi) {
    lo = kPartial ? V::load_n(at(r, c), m) : V::load(at(r, c));
    hi = kPartial ? V::load_n(at(r, c) + 4, m - 4) : V::load(at(r, c) + 4);
  };
  const auto store_acc = [&](int r, int c, float32x4_t lo, float32x4_t hi) {
    if constexpr (kPartial) {
      V::store_n(at(r, c), lo, m);
      V::store_n(at(r, c) + 4, hi, m - 4);
    } else {
      V::store(at(r, c), lo);
      V::store(at(r, c) + 4, hi);
    }
  };
  float32x4_t lo[kInRegisters ? R : 1][kInRegisters ? C : 1];
  float32x4_t hi[kInRegisters ? R : 1][kInRegisters ? C : 1];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      float32x4_t l, h;
      load_acc(r, c, l, h);
      if (row_scale != nullptr) {
        l = vmulq_f32(l, vdupq_n_f32(row_scale[r]));
        h = vmulq_f32(h, vdupq_n_f32(row_scale[r]));
      }
      if constexpr (kInRegisters) {
        lo[r][c] = l;
        hi[r][c] = h;
      } else if (row_scale != nullptr) {
        store_acc(r, c, l, h);
      }
    }
  }
  float16x8_t run[R][C];
  for (int64_t j0 = 0; j0 < num_rows; j0 += kF16Run) {
    const int64_t j1 = simd::min_i64<V>(j0 + kF16Run, num_rows);
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < C; ++c) run[r][c] = vdupq_n_f16(0.0f);
    }
    for (int64_t j = j0; j < j1; ++j) {
      float16x8_t vv[C];
      const uint16_t* row = v + j * row_stride + d;
      for (int c = 0; c < C; ++c) {
        if constexpr (kPartial) {
          uint16_t block[kF16Lanes] = {};  // +0 in fp16; reading past the row could meet an inf
          for (int i = 0; i < m; ++i) block[i] = row[i];
          vv[c] = load_f16x8(block);
        } else {
          vv[c] = load_f16x8(row + c * kF16Lanes);
        }
      }
      for (int r = 0; r < R; ++r) {
        const float16x8_t weight = vreinterpretq_f16_u16(vld1q_dup_u16(wh + r * ldw + j));
        for (int c = 0; c < C; ++c) run[r][c] = vfmaq_f16(run[r][c], vv[c], weight);
      }
    }
    // Unrolled whole, so that run[][] is indexed by constants and stays in registers.
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const float32x4_t scale_up = vdupq_n_f32(up[r]);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        float32x4_t l, h;
        if constexpr (kInRegisters) {
          l = lo[r][c], h = hi[r][c];
        } else {
          load_acc(r, c, l, h);
        }
        l = vfmaq_f32(l, vcvt_f32_f16(vget_low_f16(run[r][c])), scale_up);
        h = vfmaq_f32(h, vcvt_high_f32_f16(run[r][c]), scale_up);
        if constexpr (kInRegisters) {
          lo[r][c] = l, hi[r][c] = h;
        } else {
          store_acc(r, c, l, h);
        }
      }
    }
  }
  if constexpr (kInRegisters) {
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < C; ++c) store_acc(r, c, lo[r][c], hi[r][c]);
    }
  }
}

// R query rows over all n columns: C vectors at a time, then single vectors, then the partial
// last one.
template <class V, int R, int C>
void f16_value_rows(const uint16_t* wh, int64_t ldw, const float* up, const float* row_scale,
                    const uint16_t* v, int64_t row_stride, int64_t num_rows, int64_t n, float* acc,
                    int64_t lda) {
  int64_t d = 0;
  for (; d + C * kF16Lanes <= n; d += C * kF16Lanes) {
    f16_value_tile<V, R, C, false>(wh, ldw, up, row_scale, v, row_stride, num_rows, d, kF16Lanes,
                                   acc, lda);
  }
  for (; d + kF16Lanes <= n; d += kF16Lanes) {
    f16_value_tile<V, R, 1, false>(wh, ldw, up, row_scale, v, row_stride, num_rows, d, kF16Lanes,
                                   acc, lda);
  }
  if (d < n) {
    f16_value_tile<V, R, 1, true>(wh, ldw, up, row_scale, v, row_stride, num_rows, d,
                                  static_cast<int>(n - d), acc, lda);
  }
}

// Decode: one query row, 4 vectors (32 columns) per pass: 12 accumulators + 4 cache vectors.
template <class V>
void axpy_rows(const float* coeffs, const void* rows, DType rows_dtype, int64_t row_stride,
               int64_t num_rows, int64_t n, float* y) {
  if (rows_dtype != DType::kF16) {
    simd::axpy_rows<V>(coeffs, rows, rows_dtype, row_stride, num_rows, n, y);
    return;
  }
  const F16Activations<V> w =
      f16_activations<V, kF16WeightTopExponent>(coeffs, 1, num_rows, num_rows);
  f16_value_rows<V, 1, 4>(w.h, w.padded, w.up, nullptr, static_cast<const uint16_t*>(rows),
                          row_stride, num_rows, n, y, 0);
}

// Prefill, one cache block: 3 query rows x 4 vectors per pass (12 fp16 runs + 4 cache
// vectors + 3 weights), each cache vector loaded once for 3 fmla; then the 1-2 rows left.
// row_scale may be null (no rescale).
template <class V>
void f16_block_values(const float* p, int64_t ldp, int64_t num_q, const float* row_scale,
                      const uint16_t* v, int64_t row_stride, int64_t num_rows, int64_t n,
                      float* acc, int64_t lda) {
  const F16Activations<V> w = f16_activations<V, kF16WeightTopExponent>(p, num_q, num_rows, ldp);
  const auto scale_of = [&](int64_t i) { return row_scale == nullptr ? nullptr : row_scale + i; };
  constexpr int kRows = 3;
  int64_t i = 0;
  for (; i + kRows <= num_q; i += kRows) {
    f16_value_rows<V, kRows, 4>(w.h + i * w.padded, w.padded, w.up + i, scale_of(i), v, row_stride,
                                num_rows, n, acc + i * lda, lda);
  }
  if (num_q - i == 2) {
    f16_value_rows<V, 2, 4>(w.h + i * w.padded, w.padded, w.up + i, scale_of(i), v, row_stride,
                            num_rows, n, acc + i * lda, lda);
  } else if (num_q - i == 1) {
    f16_value_rows<V, 1, 4>(w.h + i * w.padded, w.padded, w.up + i, scale_of(i), v, row_stride,
                            num_rows, n, acc + i * lda, lda);
  }
}

// Prefill over a key tile of several cache blocks: block by block, the rescale with the first
// (x 1 after it would be exact anyway). Each block is its own call because the fp16 weights'
// power-of-two scale and the runs of 8 start at a block's first row in axpy_rows too, which
// decode calls once per block: so one query row here gives decode's bits.
template <class V>
void attention_values(const float* p, int64_t ldp, int64_t num_q, const float* row_scale,
                      const void* const* blocks, int64_t block_rows, DType rows_dtype,
                      int64_t row_stride, int64_t num_rows, int64_t n, float* acc, int64_t lda) {
  if (rows_dtype != DType::kF16) {
    simd::attention_values<V>(p, ldp, num_q, row_scale, blocks, block_rows, rows_dtype, row_stride,
                              num_rows, n, acc, lda);
    return;
  }
  for (int64_t first = 0, b = 0; first < num_rows; first += block_rows, ++b) {
    const int64_t rows = std::min(block_rows, num_rows - first);
    f16_block_values<V>(p + first, ldp, num_q, b == 0 ? row_scale : nullptr,
                        static_cast<const uint16_t*>(blocks[b]), row_stride, rows, n, acc, lda);
  }
}

}  // namespace pagoda::arm
