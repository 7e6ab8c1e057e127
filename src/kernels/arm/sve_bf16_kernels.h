// bf16 weights on SVE's bfdot (FEAT_BF16 with SVE, HWCAP2_SVEBF16: Neoverse V1 / Graviton 3;
// not A64FX), for arm/sve.cpp where the CPU reports svebf16. One bfdot multiplies svcnth()
// bf16 pairs into svcntw() fp32 lanes, on the weights as stored: 16 multiply-adds at 256 bits,
// twice NEON's bfdot, where the widening SVE loop (arm/sve_float_kernels.h) does 8 per fmla
// plus a shift per weight vector.
//
// Precision: as NEON's bfdot (arm/bf16_kernels.h, whose rounding of x to bf16 this reuses): x
// rounded to bf16 once per call (KernelTable::matmul_bf16_activations), each lane a run of
// BFDotAdd. Batch invariance as the widening tiles: one accumulator per (row, token), the
// columns left to right a step (svcnth() values) at a time, the partial step's missing values
// loaded as zeros (bfdot has no predicate: a zero pair adds exactly nothing), one faddv. Rows
// past the matrix's last row repeat it (computed, never stored).
//
// Included by arm/sve.cpp only (compiled with +sve+bf16); templates on its traits V.
#pragma once

#include <arm_sve.h>

#include <cstdint>

#include "kernels/arm/bf16_kernels.h"
#include "kernels/arm/sve_float_kernels.h"

namespace pagoda::arm::sve {

// y[t * ldy + r] = (row `row` + r of w) . (token t of xb) for r < num_rows (<= kMatmulRows)
// and t < kTokens; rows of `cols` bf16 values, tokens at stride ldx (rounded to bf16).
template <class V, int kTokens>
[[gnu::noinline]] void bfdot_tile(const bfloat16_t* xb, int64_t ldx, const uint16_t* w, int64_t row,
                                  int64_t num_rows, int64_t cols, float* y, int64_t ldy) {
  static_assert(kMatmulRows == 4 && kTokens >= 1 && kTokens <= kMatmulTokens);
  const int64_t step = static_cast<int64_t>(svcnth());
  const svbool_t all = svptrue_b16();
  const auto row_at = [&](int64_t r) {
    return reinterpret_cast<const bfloat16_t*>(w) +
           (row + (r < num_rows ? r : num_rows - 1)) * cols;
  };
  const bfloat16_t *w0 = row_at(0), *w1 = row_at(1), *w2 = row_at(2), *w3 = row_at(3);
  const svfloat32_t zero = svdup_n_f32(0.0f);
  svfloat32_t a00 = zero, a01 = zero, a02 = zero, a03 = zero;  // token 0, rows 0-3
  svfloat32_t a10 = zero, a11 = zero, a12 = zero, a13 = zero;
  svfloat32_t a20 = zero, a21 = zero, a22 = zero, a23 = zero;
  svfloat32_t a30 = zero, a31 = zero, a32 = zero, a33 = zero;
  svfloat32_t a40 = zero, a41 = zero, a42 = zero, a43 = zero;
  svfloat32_t a50 = zero, a51 = zero, a52 = zero, a53 = zero;
  const auto for_each_token = [&](auto&& f) {
    f(a00, a01, a02, a03, 0);
    if constexpr (kTokens > 1) f(a10, a11, a12, a13, 1);
    if constexpr (kTokens > 2) f(a20, a21, a22, a23, 2);
    if constexpr (kTokens > 3) f(a30, a31, a32, a33, 3);
    if constexpr (kTokens > 4) f(a40, a41, a42, a43, 4);
    if constexpr (kTokens > 5) f(a50, a51, a52, a53, 5);
  };
  const auto columns = [&](svbool_t pg, int64_t c) {
    const svbfloat16_t v0 = svld1_bf16(pg, w0 + c), v1 = svld1_bf16(pg, w1 + c);
    const svbfloat16_t v2 = svld1_bf16(pg, w2 + c), v3 = svld1_bf16(pg, w3 + c);
    for_each_token([&](svfloat32_t& r0, svfloat32_t& r1, svfloat32_t& r2, svfloat32_t& r3, int t) {
      const svbfloat16_t xv = svld1_bf16(pg, xb + t * ldx + c);
      r0 = svbfdot_f32(r0, v0, xv);
      r1 = svbfdot_f32(r1, v1, xv);
      r2 = svbfdot_f32(r2, v2, xv);
      r3 = svbfdot_f32(r3, v3, xv);
    });
  };
  // Decode: two steps (64 bytes at 256 bits) an iteration and one prefetch per row, 1 KiB
  // ahead, as the widening tiles.
  int64_t c = 0;
  if constexpr (kTokens == 1) {
    for (; c + 2 * step <= cols; c += 2 * step) {
      svprfh(all, w0 + c + 512, SV_PLDL2KEEP);
      svprfh(all, w1 + c + 512, SV_PLDL2KEEP);
      svprfh(all, w2 + c + 512, SV_PLDL2KEEP);
      svprfh(all, w3 + c + 512, SV_PLDL2KEEP);
      columns(all, c);
      columns(all, c + step);
    }
  }
  for (; c < cols; c += step) columns(svwhilelt_b16(c, cols), c);
  const svbool_t all32 = svptrue_b32();
  for_each_token([&](svfloat32_t& r0, svfloat32_t& r1, svfloat32_t& r2, svfloat32_t& r3, int t) {
    float* out = y + t * ldy;
    out[0] = svaddv_f32(all32, r0);
    if (num_rows > 1) out[1] = svaddv_f32(all32, r1);
    if (num_rows > 2) out[2] = svaddv_f32(all32, r2);
    if (num_rows > 3) out[3] = svaddv_f32(all32, r3);
  });
}

// x rounded to bf16 once per call, then the tiles as matmul_widened's.
template <class V>
void matmul_bf16_dot(const float* x, int64_t num_tokens, const WeightView& w, int64_t row_begin,
                     int64_t row_end, float* y, int64_t ldy) {
  if (row_end <= row_begin || num_tokens <= 0) return;
  const int64_t cols = w.cols, padded = (cols + kBf16Lanes - 1) & ~(kBf16Lanes - 1);
  const bfloat16_t* xb = round_activations_to_bf16<V>(x, num_tokens, cols, padded);
  const auto* wb = static_cast<const uint16_t*>(w.data);
  for (int64_t r = row_begin; r < row_end; r += kMatmulRows) {
    const int64_t rows = simd::min_i64<V>(kMatmulRows, row_end - r);
    for (int64_t t = 0; t < num_tokens; t += kMatmulTokens) {
      with_matmul_tokens<kMatmulTokens>(num_tokens - t, [&]<int T>() {
        bfdot_tile<V, T>(xb + t * padded, padded, wb, r, rows, cols, y + t * ldy + r, ldy);
      });
    }
  }
}

}  // namespace pagoda::arm::sve
