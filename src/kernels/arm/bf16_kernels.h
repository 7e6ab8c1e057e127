// bf16 weights on bfdot (Armv8.6-A FEAT_BF16, optional from Armv8.2-A: Neoverse V1 / N2,
// Graviton 3; not Kunpeng 920), for the AArch64 files compiled with +bf16. The shared path
// (simd/simd_kernels.h) widens bf16 to fp32 with shifts and multiplies 4 lanes per fmla; bfdot
// multiplies 8 bf16 pairs into 4 fp32 lanes per instruction, on the stored weights. This file
// holds the bfdot tile (decode) and the column loop that the bfmmla tiles of many tokens
// (arm/bf16_mmla_kernels.h) share with it, so that both compute the same bits.
//
// Precision: x is rounded to bf16 once per call (bfcvtn, round to nearest even: 2^-8 relative
// per product, as AVX-512's vdpbf16ps; KernelTable::matmul_bf16_activations says so and the
// tests add sum|x w| / 256 to their tolerance). Each bfdot lane (and each bfmmla result) is a
// run of the Arm ARM's BFDotAdd: the two products of bf16 values (exact in fp32), their sum,
// then the sum with the accumulator, each rounded in fp32 to odd with denormals flushed, the
// FPCR's rounding mode ignored (with FEAT_EBF16 and FPCR.EBF = 1: one fused rounding by the
// FPCR instead; either way both instructions do the same). Round to odd is off by up to one
// ulp where nearest even is off by half: 2 n u sum|x w| for n columns, what the tests allow.
// Every (row, token) pair runs the same operations in the same order: batch invariant.
//
// Templates on the vector traits V (ODR rules of simd/simd_kernels.h).
#pragma once

#include <arm_neon.h>

#include <cstdint>

#include "kernels/simd/simd_kernels.h"

namespace pagoda::arm {

constexpr int64_t kBf16Lanes = 8;

// The activations rounded to bf16 (nearest even), each token zero-padded to `padded` (a
// multiple of 8) values: [num_tokens, padded], in per-thread scratch.
template <class V>
const bfloat16_t* round_activations_to_bf16(const float* x, int64_t num_tokens, int64_t cols,
                                            int64_t padded) {
  static thread_local simd::Scratch<V> scratch;
  auto* xb = static_cast<bfloat16_t*>(scratch.get(static_cast<size_t>(num_tokens * padded * 2)));
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* src = x + t * cols;
    bfloat16_t* dst = xb + t * padded;
    for (int64_t i = 0; i < padded; i += 4) {
      float block[4] = {};
      for (int j = 0; j < 4 && i + j < cols; ++j) block[j] = src[i + j];
      vst1_bf16(dst + i, vcvt_bf16_f32(vld1q_f32(block)));
    }
  }
  return xb;
}

// acc[r][t] += columns [c, n) of row w_rows[r] times token x_rows[t], lane l taking the pair
// (2l, 2l + 1) of each 8 columns: the lane order that the bfmmla tiles reproduce. Rows hold n
// values; tokens are zero-padded to a multiple of 8. The last partial vector of a row is
// copied with zeros (reading past the row could meet an inf).
template <class V, int kRows, int kTokens>
[[gnu::always_inline]] inline void bf16_dot_columns(float32x4_t (&acc)[kRows][kTokens],
                                                    const uint16_t* const (&w_rows)[kRows],
                                                    const bfloat16_t* const (&x_rows)[kTokens],
                                                    int64_t c, int64_t n, bool prefetch) {
  const auto step = [&](const bfloat16x8_t(&wv)[kRows], int64_t col) {
    for (int t = 0; t < kTokens; ++t) {
      const bfloat16x8_t xv = vld1q_bf16(x_rows[t] + col);
      for (int r = 0; r < kRows; ++r) acc[r][t] = vbfdotq_f32(acc[r][t], wv[r], xv);
    }
  };
  const auto load_step = [&](int64_t col) {
    bfloat16x8_t wv[kRows];
    for (int r = 0; r < kRows; ++r) wv[r] = vreinterpretq_bf16_u16(vld1q_u16(w_rows[r] + col));
    step(wv, col);
  };
  const int64_t whole = n & ~(kBf16Lanes - 1);
  // 32 columns an iteration: one prefetch per 64-byte line of each row, 1 KiB ahead (decode
  // streams from DRAM).
  for (; c + 4 * kBf16Lanes <= whole; c += 4 * kBf16Lanes) {
    if (prefetch) {
      for (int r = 0; r < kRows; ++r) V::prefetch_l2(w_rows[r] + c + 512);
    }
    for (int s = 0; s < 4; ++s) load_step(c + s * kBf16Lanes);
  }
  for (; c < whole; c += kBf16Lanes) load_step(c);
  if (c < n) {
    bfloat16x8_t wv[kRows];
    for (int r = 0; r < kRows; ++r) {
      uint16_t block[kBf16Lanes] = {};  // +0 in bf16
      for (int64_t j = 0; c + j < n; ++j) block[j] = w_rows[r][c + j];
      wv[r] = vreinterpretq_bf16_u16(vld1q_u16(block));
    }
    step(wv, c);
  }
}

// y[t * ldy + r] = the sum of acc[r][t]'s lanes ((l0 + l1) + (l2 + l3), faddp's order) for the
// first num_rows rows and num_tokens tokens.
template <int kRows, int kTokens>
[[gnu::always_inline]] inline void store_bf16_dot_sums(const float32x4_t (&acc)[kRows][kTokens],
                                                       int64_t num_rows, int64_t num_tokens,
                                                       float* y, int64_t ldy) {
  for (int r = 0; r < kRows; ++r) {
    for (int t = 0; t < kTokens; ++t) {
      if (r < num_rows && t < num_tokens) y[t * ldy + r] = vaddvq_f32(acc[r][t]);
    }
  }
}

// y[t * ldy + r] = (row r of w) . (token t of xb), kRows rows x kTokens tokens; rows of n
// values at stride ldw, tokens zero-padded to a multiple of 8 at stride ldx.
template <class V, int kRows, int kTokens>
[[gnu::noinline]] void bf16_dot_tile(const bfloat16_t* xb, int64_t ldx, const uint16_t* w,
                                     int64_t ldw, int64_t n, bool prefetch, float* y, int64_t ldy) {
  float32x4_t acc[kRows][kTokens];
  for (int r = 0; r < kRows; ++r) {
    for (int t = 0; t < kTokens; ++t) acc[r][t] = vdupq_n_f32(0.0f);
  }
  const uint16_t* w_rows[kRows];
  for (int r = 0; r < kRows; ++r) w_rows[r] = w + r * ldw;
  const bfloat16_t* x_rows[kTokens];
  for (int t = 0; t < kTokens; ++t) x_rows[t] = xb + t * ldx;
  bf16_dot_columns<V, kRows, kTokens>(acc, w_rows, x_rows, 0, n, prefetch);
  store_bf16_dot_sums<kRows, kTokens>(acc, kRows, kTokens, y, ldy);
}

// Decode: one token (rounded to bf16 in xb) against rows [row_begin, row_end), streamed 4 rows
// at a time. Two or more tokens take the bfmmla tiles (arm/bf16_mmla_kernels.h).
constexpr int kBf16DecodeRows = 4;

template <class V>
void matmul_bf16_one_token(const bfloat16_t* xb, const WeightView& w, int64_t row_begin,
                           int64_t row_end, float* y) {
  const int64_t cols = w.cols;
  const auto* wb = static_cast<const uint16_t*>(w.data);
  for (int64_t r = row_begin; r < row_end; r += kBf16DecodeRows) {
    simd::with_tile_shape<V, kBf16DecodeRows, 1>(
        simd::min_i64<V>(kBf16DecodeRows, row_end - r), 1, [&]<int R, int T>() {
          bf16_dot_tile<V, R, T>(xb, 0, wb + r * cols, cols, cols, true, y + r, 0);
        });
  }
}

}  // namespace pagoda::arm
