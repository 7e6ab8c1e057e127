// fp32 arithmetic on SVE vectors for arm/sve.cpp: the f32, f16 and bf16 weight matmul and the
// scores and value sums over an f32 / f16 / bf16 KV cache (dot, dot_rows, attention_scores,
// axpy_rows, attention_values). Vector-length agnostic: a step is svcntw() columns (8 at 256 bits,
// 16 at 512), read at run time, and the last partial step is predicated (svwhilelt), so no tail is
// copied. 16-bit values are widened exactly as they are loaded: ld1h into the low half of each
// 32-bit lane, then fcvt (f16) or a shift left by 16 (bf16), so a 16-bit row gives the bits of an
// f32 row holding its values.
//
// Matmul. One accumulator vector per (row, token), the columns left to right a step at a time,
// the partial step merged into the accumulator under its predicate, one faddv at the end: the
// same chain for every (row, token) whatever the tile, so a token's result does not depend on
// the tokens or rows computed with it, nor on the token count (decode and prefill give the same
// bits). Tiles are kMatmulRows rows x 1..kMatmulTokens tokens; rows past the matrix's last row
// repeat it (computed, never stored). SVE values cannot be array elements, so a tile's
// accumulators are named variables and for_each_* helpers visit them.
//
// Attention. dot, dot_rows and attention_scores compute each score with the same two chains:
// the steps in pairs, the first of each pair into acc0 and the second into acc1, the steps
// after the last pair into acc0, then faddv(acc0 + acc1), as the shared templates do with
// NEON's 4 lanes (simd/simd_kernels.h, simd/attention_tiles.h) but a step of svcntw(). So a
// position's score is the same whether it is decoded (dot_rows) or prefilled (the tile).
// axpy_rows adds c_j * v_j into each y element with one fused multiply-add per row, in row
// order, and attention_values the same after the rescale: per element the operations of the
// NEON table's axpy (which the sve table keeps), so the vector length does not change the bits
// and a prefilled position's value sum is the decoded one's.
//
// Included by arm/sve.cpp only (compiled with +sve+bf16); templates on its traits V, so nothing
// here is shared with a file compiled for another ISA (the ODR rules of simd/simd_kernels.h).
#pragma once

#include <arm_sve.h>

#include <cstdint>

#include "kernels/simd/simd_kernels.h"

namespace pagoda::arm::sve {

// svcntw() values stored as kType from element `index`, widened to fp32 (lanes outside pg: 0).
template <DType kType>
inline svfloat32_t load_widened(svbool_t pg, const void* base, int64_t index) {
  if constexpr (kType == DType::kF32) {
    return svld1_f32(pg, static_cast<const float*>(base) + index);
  } else {
    const svuint32_t bits = svld1uh_u32(pg, static_cast<const uint16_t*>(base) + index);
    if constexpr (kType == DType::kBF16) {
      return svreinterpret_f32_u32(svlsl_n_u32_x(pg, bits, 16));
    } else {
      return svcvt_f32_f16_x(pg, svreinterpret_f16_u32(bits));
    }
  }
}

// The I-th of up to four values (tiles index their named operands at compile time).
template <int I>
inline svfloat32_t pick(svfloat32_t a, svfloat32_t b, svfloat32_t c, svfloat32_t d) {
  if constexpr (I == 0) return a;
  if constexpr (I == 1) return b;
  if constexpr (I == 2) return c;
  return d;
}

// ---------------------------------------------------------------------------------------------
// Matmul on f32 / f16 / bf16 weights, widened to fp32.

constexpr int kMatmulRows = 4;
// 4 x 6 = 24 accumulators + 4 weight vectors + one of x: 29 of the 32 z registers.
constexpr int kMatmulTokens = 6;

// y[t * ldy + r] = (row `row` + r of w) . (token t of x) for r < num_rows (<= kMatmulRows) and
// t < kTokens; rows of `cols` values, tokens at stride ldx. Out of line so that the disassembly
// names each tile (bench/peers/aarch64_inner_loops.py).
template <class V, DType kType, int kTokens>
[[gnu::noinline]] void matmul_tile(const float* x, int64_t ldx, const void* w, int64_t row,
                                   int64_t num_rows, int64_t cols, float* y, int64_t ldy) {
  static_assert(kMatmulRows == 4 && kTokens >= 1 && kTokens <= kMatmulTokens);
  const int64_t step = static_cast<int64_t>(svcntw());
  const svbool_t all = svptrue_b32();
  const auto row_start = [&](int64_t r) {
    return (row + (r < num_rows ? r : num_rows - 1)) * cols;
  };
  const int64_t w0 = row_start(0), w1 = row_start(1), w2 = row_start(2), w3 = row_start(3);
  constexpr int64_t kElemBytes = kType == DType::kF32 ? 4 : 2;
  const svfloat32_t zero = svdup_n_f32(0.0f);
  svfloat32_t a00 = zero, a01 = zero, a02 = zero, a03 = zero;  // token 0, rows 0-3
  svfloat32_t a10 = zero, a11 = zero, a12 = zero, a13 = zero;
  svfloat32_t a20 = zero, a21 = zero, a22 = zero, a23 = zero;
  svfloat32_t a30 = zero, a31 = zero, a32 = zero, a33 = zero;
  svfloat32_t a40 = zero, a41 = zero, a42 = zero, a43 = zero;
  svfloat32_t a50 = zero, a51 = zero, a52 = zero, a53 = zero;
  // f(token's accumulators for rows 0-3, t) for t < kTokens.
  const auto for_each_token = [&](auto&& f) {
    f(a00, a01, a02, a03, 0);
    if constexpr (kTokens > 1) f(a10, a11, a12, a13, 1);
    if constexpr (kTokens > 2) f(a20, a21, a22, a23, 2);
    if constexpr (kTokens > 3) f(a30, a31, a32, a33, 3);
    if constexpr (kTokens > 4) f(a40, a41, a42, a43, 4);
    if constexpr (kTokens > 5) f(a50, a51, a52, a53, 5);
  };
  const auto columns = [&](svbool_t pg, int64_t c) {
    const svfloat32_t v0 = load_widened<kType>(pg, w, w0 + c);
    const svfloat32_t v1 = load_widened<kType>(pg, w, w1 + c);
    const svfloat32_t v2 = load_widened<kType>(pg, w, w2 + c);
    const svfloat32_t v3 = load_widened<kType>(pg, w, w3 + c);
    for_each_token([&](svfloat32_t& r0, svfloat32_t& r1, svfloat32_t& r2, svfloat32_t& r3, int t) {
      const svfloat32_t xv = svld1_f32(pg, x + t * ldx + c);
      r0 = svmla_f32_m(pg, r0, v0, xv);
      r1 = svmla_f32_m(pg, r1, v1, xv);
      r2 = svmla_f32_m(pg, r2, v2, xv);
      r3 = svmla_f32_m(pg, r3, v3, xv);
    });
  };
  // Decode streams the rows from DRAM: two steps an iteration, each row prefetched once per
  // iteration (64 bytes of f32 at 256 bits, a line), 1 KiB ahead. Tiles of several tokens read
  // rows that are in cache, a step at a time (unrolled, their 24 accumulators would spill).
  const auto* bytes = static_cast<const uint8_t*>(w);
  int64_t c = 0;
  if constexpr (kTokens == 1) {
    for (; c + 2 * step <= cols; c += 2 * step) {
      const int64_t ahead = c * kElemBytes + 1024;
      svprfb(all, bytes + w0 * kElemBytes + ahead, SV_PLDL2KEEP);
      svprfb(all, bytes + w1 * kElemBytes + ahead, SV_PLDL2KEEP);
      svprfb(all, bytes + w2 * kElemBytes + ahead, SV_PLDL2KEEP);
      svprfb(all, bytes + w3 * kElemBytes + ahead, SV_PLDL2KEEP);
      columns(all, c);
      columns(all, c + step);
    }
  }
  for (; c < cols; c += step) columns(svwhilelt_b32(c, cols), c);
  for_each_token([&](svfloat32_t& r0, svfloat32_t& r1, svfloat32_t& r2, svfloat32_t& r3, int t) {
    float* out = y + t * ldy;
    out[0] = svaddv_f32(all, r0);
    if (num_rows > 1) out[1] = svaddv_f32(all, r1);
    if (num_rows > 2) out[2] = svaddv_f32(all, r2);
    if (num_rows > 3) out[3] = svaddv_f32(all, r3);
  });
}

// body.template operator()<T>() with T = min(tokens, kMax): edge tiles get fewer tokens.
template <int kMax, class Body>
inline void with_matmul_tokens(int64_t tokens, Body&& body) {
  if constexpr (kMax > 1) {
    if (tokens < kMax) return with_matmul_tokens<kMax - 1>(tokens, body);
  }
  body.template operator()<kMax>();
}

// Rows in tiles of kMatmulRows, each swept by the tokens in tiles of kMatmulTokens: a tile's
// rows stay in L1 / L2 while every token passes over them (decode: one pass, streamed).
template <class V, DType kType>
void matmul_widened(const float* x, int64_t num_tokens, const WeightView& w, int64_t row_begin,
                    int64_t row_end, float* y, int64_t ldy) {
  const int64_t cols = w.cols;
  for (int64_t r = row_begin; r < row_end; r += kMatmulRows) {
    const int64_t rows = simd::min_i64<V>(kMatmulRows, row_end - r);
    for (int64_t t = 0; t < num_tokens; t += kMatmulTokens) {
      with_matmul_tokens<kMatmulTokens>(num_tokens - t, [&]<int T>() {
        matmul_tile<V, kType, T>(x + t * cols, cols, w.data, r, rows, cols, y + t * ldy + r, ldy);
      });
    }
  }
}

template <class V>
void matmul(const float* x, int64_t num_tokens, const WeightView& w, int64_t row_begin,
            int64_t row_end, float* y, int64_t ldy) {
  if (row_end <= row_begin || num_tokens <= 0) return;
  simd::with_cache_dtype<V>(w.dtype, [&]<DType kType>() {
    matmul_widened<V, kType>(x, num_tokens, w, row_begin, row_end, y, ldy);
  });
}

// ---------------------------------------------------------------------------------------------
// Scores: kQueries query rows (at q, stride ldq) against kRows cache rows (the first at element
// `index`, stride row_stride), n dims: s[i * lds + j].

template <class V, DType kType, int kQueries, int kRows>
[[gnu::noinline]] void score_tile(const float* q, int64_t ldq, const void* rows, int64_t index,
                                  int64_t row_stride, int64_t n, float* s, int64_t lds) {
  static_assert(kQueries >= 1 && kQueries <= 3 && kRows >= 1 && kRows <= 4);
  const int64_t step = static_cast<int64_t>(svcntw());
  const svbool_t all = svptrue_b32();
  const svfloat32_t zero = svdup_n_f32(0.0f);
  // e<i><j>: query i, cache row j, the first step of each pair (and the steps after the pairs);
  // o<i><j>: the second step of each pair.
  svfloat32_t e00 = zero, e01 = zero, e02 = zero, e03 = zero;
  svfloat32_t e10 = zero, e11 = zero, e12 = zero, e13 = zero;
  svfloat32_t e20 = zero, e21 = zero, e22 = zero, e23 = zero;
  svfloat32_t o00 = zero, o01 = zero, o02 = zero, o03 = zero;
  svfloat32_t o10 = zero, o11 = zero, o12 = zero, o13 = zero;
  svfloat32_t o20 = zero, o21 = zero, o22 = zero, o23 = zero;
  // f.template operator()<i>(query i's four pairs of accumulators) for i < kQueries.
  const auto for_each_query = [&](auto&& f) {
    f.template operator()<0>(e00, e01, e02, e03, o00, o01, o02, o03);
    if constexpr (kQueries > 1) f.template operator()<1>(e10, e11, e12, e13, o10, o11, o12, o13);
    if constexpr (kQueries > 2) f.template operator()<2>(e20, e21, e22, e23, o20, o21, o22, o23);
  };
  // One step at column d into the first (kSecond false) or second accumulators.
  const auto columns = [&]<bool kSecond>(svbool_t pg, int64_t d) {
    const svfloat32_t k0 = load_widened<kType>(pg, rows, index + d);
    const svfloat32_t k1 = kRows > 1 ? load_widened<kType>(pg, rows, index + row_stride + d) : k0;
    const svfloat32_t k2 =
        kRows > 2 ? load_widened<kType>(pg, rows, index + 2 * row_stride + d) : k0;
    const svfloat32_t k3 =
        kRows > 3 ? load_widened<kType>(pg, rows, index + 3 * row_stride + d) : k0;
    for_each_query([&]<int kI>(svfloat32_t& e0, svfloat32_t& e1, svfloat32_t& e2, svfloat32_t& e3,
                               svfloat32_t& o0, svfloat32_t& o1, svfloat32_t& o2, svfloat32_t& o3) {
      const svfloat32_t qv = svld1_f32(pg, q + kI * ldq + d);
      svfloat32_t& a0 = kSecond ? o0 : e0;
      svfloat32_t& a1 = kSecond ? o1 : e1;
      svfloat32_t& a2 = kSecond ? o2 : e2;
      svfloat32_t& a3 = kSecond ? o3 : e3;
      a0 = svmla_f32_m(pg, a0, qv, k0);
      if constexpr (kRows > 1) a1 = svmla_f32_m(pg, a1, qv, k1);
      if constexpr (kRows > 2) a2 = svmla_f32_m(pg, a2, qv, k2);
      if constexpr (kRows > 3) a3 = svmla_f32_m(pg, a3, qv, k3);
    });
  };
  int64_t d = 0;
  for (; d + 2 * step <= n; d += 2 * step) {
    columns.template operator()<false>(all, d);
    columns.template operator()<true>(all, d + step);
  }
  for (; d < n; d += step) columns.template operator()<false>(svwhilelt_b32(d, n), d);
  for_each_query([&]<int kI>(svfloat32_t& e0, svfloat32_t& e1, svfloat32_t& e2, svfloat32_t& e3,
                             svfloat32_t& o0, svfloat32_t& o1, svfloat32_t& o2, svfloat32_t& o3) {
    float* out = s + kI * lds;
    out[0] = svaddv_f32(all, svadd_f32_x(all, e0, o0));
    if constexpr (kRows > 1) out[1] = svaddv_f32(all, svadd_f32_x(all, e1, o1));
    if constexpr (kRows > 2) out[2] = svaddv_f32(all, svadd_f32_x(all, e2, o2));
    if constexpr (kRows > 3) out[3] = svaddv_f32(all, svadd_f32_x(all, e3, o3));
  });
}

// kQueries query rows against num_rows cache rows: 4 at a time, then the last 1-3.
template <class V, DType kType, int kQueries>
void score_rows(const float* q, int64_t ldq, const void* rows, int64_t row_stride, int64_t num_rows,
                int64_t n, float* s, int64_t lds) {
  int64_t j = 0;
  for (; j + 4 <= num_rows; j += 4) {
    score_tile<V, kType, kQueries, 4>(q, ldq, rows, j * row_stride, row_stride, n, s + j, lds);
  }
  const int64_t index = j * row_stride;
  switch (num_rows - j) {
    case 3:
      score_tile<V, kType, kQueries, 3>(q, ldq, rows, index, row_stride, n, s + j, lds);
      break;
    case 2:
      score_tile<V, kType, kQueries, 2>(q, ldq, rows, index, row_stride, n, s + j, lds);
      break;
    case 1:
      score_tile<V, kType, kQueries, 1>(q, ldq, rows, index, row_stride, n, s + j, lds);
      break;
    default:
      break;
  }
}

template <class V>
float dot(const float* a, const float* b, int64_t n) {
  float out;
  score_tile<V, DType::kF32, 1, 1>(a, 0, b, 0, 0, n, &out, 0);
  return out;
}

template <class V>
void dot_rows(const float* a, const void* rows, DType rows_dtype, int64_t row_stride,
              int64_t num_rows, int64_t n, float* out) {
  simd::with_cache_dtype<V>(rows_dtype, [&]<DType kType>() {
    score_rows<V, kType, 1>(a, 0, rows, row_stride, num_rows, n, out, 0);
  });
}

// Query rows in tiles of 3 (24 accumulators + 4 cache vectors + a query vector), then the last
// 1-2.
template <class V>
void attention_scores(const float* q, int64_t ldq, int64_t num_q, const void* rows,
                      DType rows_dtype, int64_t row_stride, int64_t num_rows, int64_t n, float* s,
                      int64_t lds) {
  simd::with_cache_dtype<V>(rows_dtype, [&]<DType kType>() {
    int64_t i = 0;
    for (; i + 3 <= num_q; i += 3) {
      score_rows<V, kType, 3>(q + i * ldq, ldq, rows, row_stride, num_rows, n, s + i * lds, lds);
    }
    if (num_q - i == 2) {
      score_rows<V, kType, 2>(q + i * ldq, ldq, rows, row_stride, num_rows, n, s + i * lds, lds);
    } else if (num_q - i == 1) {
      score_rows<V, kType, 1>(q + i * ldq, ldq, rows, row_stride, num_rows, n, s + i * lds, lds);
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Value sums: y += coeffs[j] * row j for j = 0, 1, ... in that order, 4 vectors of y held in
// registers across the rows, then single (the last one predicated) vectors.

template <class V, DType kType>
[[gnu::noinline]] void axpy_rows_typed(const float* coeffs, const void* rows, int64_t row_stride,
                                       int64_t num_rows, int64_t n, float* y) {
  const int64_t step = static_cast<int64_t>(svcntw());
  const svbool_t all = svptrue_b32();
  int64_t i = 0;
  for (; i + 4 * step <= n; i += 4 * step) {
    svfloat32_t y0 = svld1_f32(all, y + i), y1 = svld1_f32(all, y + i + step);
    svfloat32_t y2 = svld1_f32(all, y + i + 2 * step), y3 = svld1_f32(all, y + i + 3 * step);
    for (int64_t j = 0; j < num_rows; ++j) {
      const svfloat32_t c = svdup_n_f32(coeffs[j]);
      const int64_t at = j * row_stride + i;
      y0 = svmla_f32_x(all, y0, c, load_widened<kType>(all, rows, at));
      y1 = svmla_f32_x(all, y1, c, load_widened<kType>(all, rows, at + step));
      y2 = svmla_f32_x(all, y2, c, load_widened<kType>(all, rows, at + 2 * step));
      y3 = svmla_f32_x(all, y3, c, load_widened<kType>(all, rows, at + 3 * step));
    }
    svst1_f32(all, y + i, y0);
    svst1_f32(all, y + i + step, y1);
    svst1_f32(all, y + i + 2 * step, y2);
    svst1_f32(all, y + i + 3 * step, y3);
  }
  for (; i < n; i += step) {
    const svbool_t pg = svwhilelt_b32(i, n);
    svfloat32_t acc = svld1_f32(pg, y + i);
    for (int64_t j = 0; j < num_rows; ++j) {
      acc = svmla_f32_m(pg, acc, svdup_n_f32(coeffs[j]),
                        load_widened<kType>(pg, rows, j * row_stride + i));
    }
    svst1_f32(pg, y + i, acc);
  }
}

template <class V>
void axpy_rows(const float* coeffs, const void* rows, DType rows_dtype, int64_t row_stride,
               int64_t num_rows, int64_t n, float* y) {
  simd::with_cache_dtype<V>(rows_dtype, [&]<DType kType>() {
    axpy_rows_typed<V, kType>(coeffs, rows, row_stride, num_rows, n, y);
  });
}

// ---------------------------------------------------------------------------------------------
// Prefill value sums: acc_i = acc_i * row_scale[i] + sum_j p[i * ldp + j] * row_j in row order,
// for kQueries query rows and 4 vectors of dims from d (predicated: the last tile's vectors may
// be partial or empty), the values' row j being row j % block_rows of blocks[j / block_rows].
// Per element the rescale, then axpy_rows' multiply-adds in its order, so a query row's bits
// are the decode path's whatever rows share its tile. Each cache vector loaded (and widened)
// once serves kQueries multiply-adds; the 12 accumulators stay in registers across the blocks.

template <class V, DType kType, int kQueries>
[[gnu::noinline]] void value_tile(const float* p, int64_t ldp, const float* row_scale,
                                  const void* const* blocks, int64_t block_rows, int64_t row_stride,
                                  int64_t num_rows, int64_t d, int64_t n, float* acc, int64_t lda) {
  static_assert(kQueries >= 1 && kQueries <= 3);
  const int64_t step = static_cast<int64_t>(svcntw());
  const svbool_t pg0 = svwhilelt_b32(d, n), pg1 = svwhilelt_b32(d + step, n);
  const svbool_t pg2 = svwhilelt_b32(d + 2 * step, n), pg3 = svwhilelt_b32(d + 3 * step, n);
  const svfloat32_t zero = svdup_n_f32(0.0f);
  svfloat32_t a00 = zero, a01 = zero, a02 = zero, a03 = zero;  // query 0, vectors 0-3
  svfloat32_t a10 = zero, a11 = zero, a12 = zero, a13 = zero;
  svfloat32_t a20 = zero, a21 = zero, a22 = zero, a23 = zero;
  const auto for_each_query = [&](auto&& f) {
    f(a00, a01, a02, a03, 0);
    if constexpr (kQueries > 1) f(a10, a11, a12, a13, 1);
    if constexpr (kQueries > 2) f(a20, a21, a22, a23, 2);
  };
  for_each_query([&](svfloat32_t& v0, svfloat32_t& v1, svfloat32_t& v2, svfloat32_t& v3, int i) {
    const float* at = acc + i * lda + d;
    const svfloat32_t scale = svdup_n_f32(row_scale[i]);
    v0 = svmul_f32_x(pg0, svld1_f32(pg0, at), scale);
    v1 = svmul_f32_x(pg1, svld1_f32(pg1, at + step), scale);
    v2 = svmul_f32_x(pg2, svld1_f32(pg2, at + 2 * step), scale);
    v3 = svmul_f32_x(pg3, svld1_f32(pg3, at + 3 * step), scale);
  });
  for (int64_t j0 = 0; j0 < num_rows; j0 += block_rows) {
    const void* rows = blocks[j0 / block_rows];
    const int64_t len = simd::min_i64<V>(block_rows, num_rows - j0);
    for (int64_t j = 0; j < len; ++j) {
      const int64_t at = j * row_stride + d;
      const svfloat32_t r0 = load_widened<kType>(pg0, rows, at);
      const svfloat32_t r1 = load_widened<kType>(pg1, rows, at + step);
      const svfloat32_t r2 = load_widened<kType>(pg2, rows, at + 2 * step);
      const svfloat32_t r3 = load_widened<kType>(pg3, rows, at + 3 * step);
      for_each_query(
          [&](svfloat32_t& v0, svfloat32_t& v1, svfloat32_t& v2, svfloat32_t& v3, int i) {
            const svfloat32_t w = svdup_n_f32(p[i * ldp + j0 + j]);
            v0 = svmla_f32_x(pg0, v0, w, r0);
            v1 = svmla_f32_x(pg1, v1, w, r1);
            v2 = svmla_f32_x(pg2, v2, w, r2);
            v3 = svmla_f32_x(pg3, v3, w, r3);
          });
    }
  }
  for_each_query([&](svfloat32_t& v0, svfloat32_t& v1, svfloat32_t& v2, svfloat32_t& v3, int i) {
    float* at = acc + i * lda + d;
    svst1_f32(pg0, at, v0);
    svst1_f32(pg1, at + step, v1);
    svst1_f32(pg2, at + 2 * step, v2);
    svst1_f32(pg3, at + 3 * step, v3);
  });
}

template <class V>
void attention_values(const float* p, int64_t ldp, int64_t num_q, const float* row_scale,
                      const void* const* blocks, int64_t block_rows, DType rows_dtype,
                      int64_t row_stride, int64_t num_rows, int64_t n, float* acc, int64_t lda) {
  const int64_t tile_dims = 4 * static_cast<int64_t>(svcntw());
  simd::with_cache_dtype<V>(rows_dtype, [&]<DType kType>() {
    const auto query_rows = [&]<int kQueries>(int64_t i) {
      for (int64_t d = 0; d < n; d += tile_dims) {
        value_tile<V, kType, kQueries>(p + i * ldp, ldp, row_scale + i, blocks, block_rows,
                                       row_stride, num_rows, d, n, acc + i * lda, lda);
      }
    };
    int64_t i = 0;
    for (; i + 3 <= num_q; i += 3) query_rows.template operator()<3>(i);
    if (num_q - i == 2) {
      query_rows.template operator()<2>(i);
    } else if (num_q - i == 1) {
      query_rows.template operator()<1>(i);
    }
  });
}

}  // namespace pagoda::arm::sve
