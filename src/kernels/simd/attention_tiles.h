// Prefill attention tiles (KernelTable::attention_scores / attention_values), written once
// against the vector-traits type V of simd_kernels.h, which includes this file at its end.
//
// A prefill work item holds many query rows (the heads of a GQA group times several tokens)
// against each cache block, so the q.k scores and the p.v sum are two small matrix products
// instead of one matrix-vector per query row: each row loaded from the cache (widened once,
// for a 16-bit cache) is reused from registers by several query rows, where dot_rows /
// axpy_rows load one cache vector per FMA.
//
// Batch invariance: every output element runs the decode path's operations in its order
// (scores: dot_rows' two FMA chains over the dims and one reduce_add; values: the rescale,
// then axpy_rows' FMA per cache row in order), and the tail tiles run the same chains with
// fewer rows or columns. So a query row's bits depend neither on which rows share its tile nor
// on whether its token is decoded alone: a verify forward of speculative decoding gives the
// logits plain decoding would.
#pragma once

#include <cstdint>

#include "kernels/kernels.h"

namespace pagoda::simd {

// Scores of R query rows against C cache rows (the first at element `index`): R x C pairs of
// accumulators, one vector of every query row and cache row loaded per step. Each score is
// computed exactly as dot_rows computes it (simd_kernels.h), so a position's score does not
// depend on whether its token is decoded alone (dot_rows) or verified or prefilled with others
// (this tile): the vector steps go in pairs, the first of each pair into acc0 and the second
// into acc1, the steps after the last pair into acc0, then reduce_add(acc0 + acc1).
template <class V, DType kType, int R, int C>
inline void score_tile(const float* q, int64_t ldq, const void* rows, int64_t index,
                       int64_t row_stride, int64_t n, float* s, int64_t lds) {
  using F = typename V::F;
  constexpr int kL = V::kLanes;
  F acc0[R][C], acc1[R][C];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) acc0[r][c] = acc1[r][c] = V::zero();
  }
  int64_t d = 0;
  for (; d + 2 * kL <= n; d += 2 * kL) {
    F k[C];
    for (int c = 0; c < C; ++c) k[c] = load_weights<V, kType>(rows, index + c * row_stride + d);
    for (int r = 0; r < R; ++r) {
      const F x = V::load(q + r * ldq + d);
      for (int c = 0; c < C; ++c) acc0[r][c] = V::fma(x, k[c], acc0[r][c]);
    }
    for (int c = 0; c < C; ++c) {
      k[c] = load_weights<V, kType>(rows, index + c * row_stride + d + kL);
    }
    for (int r = 0; r < R; ++r) {
      const F x = V::load(q + r * ldq + d + kL);
      for (int c = 0; c < C; ++c) acc1[r][c] = V::fma(x, k[c], acc1[r][c]);
    }
  }
  for (; d < n; d += kL) {
    const int m = static_cast<int>(min_i64<V>(kL, n - d));
    F k[C];
    for (int c = 0; c < C; ++c) {
      k[c] = load_weights_n<V, kType>(rows, index + c * row_stride + d, m);
    }
    for (int r = 0; r < R; ++r) {
      const F x = V::load_n(q + r * ldq + d, m);
      for (int c = 0; c < C; ++c) acc0[r][c] = V::fma(x, k[c], acc0[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) s[r * lds + c] = V::reduce_add(V::add(acc0[r][c], acc1[r][c]));
  }
}

// 3 x 4 tiles are 24 accumulators: within 32 vector registers (AVX-512, NEON) with room for
// the 4 cache vectors; with AVX2's 16, 3 x 2 (12 + 2 + a query vector).
constexpr int kScoreRows = 3;
template <class V>
constexpr int kScoreCols = V::kVectorRegisters >= 32 ? 4 : 2;

// R query rows against every cache row: kScoreCols at a time, then the last 1-3.
template <class V, DType kType, int R>
inline void score_rows(const float* q, int64_t ldq, const void* rows, int64_t row_stride,
                       int64_t num_rows, int64_t n, float* s, int64_t lds) {
  int64_t j = 0;
  constexpr int kCols = kScoreCols<V>;
  for (; j + kCols <= num_rows; j += kCols) {
    score_tile<V, kType, R, kCols>(q, ldq, rows, j * row_stride, row_stride, n, s + j, lds);
  }
  const int64_t index = j * row_stride;
  switch (num_rows - j) {
    case 3:
      score_tile<V, kType, R, 3>(q, ldq, rows, index, row_stride, n, s + j, lds);
      break;
    case 2:
      score_tile<V, kType, R, 2>(q, ldq, rows, index, row_stride, n, s + j, lds);
      break;
    case 1:
      score_tile<V, kType, R, 1>(q, ldq, rows, index, row_stride, n, s + j, lds);
      break;
    default:
      break;
  }
}

template <class V>
void attention_scores(const float* q, int64_t ldq, int64_t num_q, const void* rows,
                      DType rows_dtype, int64_t row_stride, int64_t num_rows, int64_t n, float* s,
                      int64_t lds) {
  with_cache_dtype<V>(rows_dtype, [&]<DType kType>() {
    int64_t i = 0;
    for (; i + kScoreRows <= num_q; i += kScoreRows) {
      score_rows<V, kType, kScoreRows>(q + i * ldq, ldq, rows, row_stride, num_rows, n, s + i * lds,
                                       lds);
    }
    if (num_q - i == 2) {
      score_rows<V, kType, 2>(q + i * ldq, ldq, rows, row_stride, num_rows, n, s + i * lds, lds);
    } else if (num_q - i == 1) {
      score_rows<V, kType, 1>(q + i * ldq, ldq, rows, row_stride, num_rows, n, s + i * lds, lds);
    }
  });
}

// acc of R query rows, C vectors wide from dim d (the last one m lanes when kPartial): rescaled,
// then every cache row's vectors, loaded once and multiplied by each query row's weight.
template <class V, DType kType, int R, int C, bool kPartial>
inline void value_tile(const float* p, int64_t ldp, const float* row_scale, const void* rows,
                       int64_t row_stride, int64_t num_rows, int64_t d, int m, float* acc,
                       int64_t lda) {
  using F = typename V::F;
  constexpr int kL = V::kLanes;
  F a[R][C];
  for (int r = 0; r < R; ++r) {
    const F scale = V::set1(row_scale[r]);
    for (int c = 0; c < C; ++c) {
      const float* at = acc + r * lda + d + c * kL;
      a[r][c] = V::mul(kPartial ? V::load_n(at, m) : V::load(at), scale);
    }
  }
  for (int64_t j = 0; j < num_rows; ++j) {
    F v[C];
    for (int c = 0; c < C; ++c) {
      const int64_t at = j * row_stride + d + c * kL;
      v[c] = kPartial ? load_weights_n<V, kType>(rows, at, m) : load_weights<V, kType>(rows, at);
    }
    for (int r = 0; r < R; ++r) {
      const F w = V::set1(p[r * ldp + j]);
      for (int c = 0; c < C; ++c) a[r][c] = V::fma(w, v[c], a[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      float* at = acc + r * lda + d + c * kL;
      if constexpr (kPartial) {
        V::store_n(at, a[r][c], m);
      } else {
        V::store(at, a[r][c]);
      }
    }
  }
}

constexpr int kValueRows = 3, kValueCols = 4;

// R query rows over all n dims: kValueCols vectors at a time, then single vectors, then the
// partial last one.
template <class V, DType kType, int R>
inline void value_rows(const float* p, int64_t ldp, const float* row_scale, const void* rows,
                       int64_t row_stride, int64_t num_rows, int64_t n, float* acc, int64_t lda) {
  constexpr int kL = V::kLanes;
  int64_t d = 0;
  for (; d + kValueCols * kL <= n; d += kValueCols * kL) {
    value_tile<V, kType, R, kValueCols, false>(p, ldp, row_scale, rows, row_stride, num_rows, d, kL,
                                               acc, lda);
  }
  for (; d + kL <= n; d += kL) {
    value_tile<V, kType, R, 1, false>(p, ldp, row_scale, rows, row_stride, num_rows, d, kL, acc,
                                      lda);
  }
  if (d < n) {
    value_tile<V, kType, R, 1, true>(p, ldp, row_scale, rows, row_stride, num_rows, d,
                                     static_cast<int>(n - d), acc, lda);
  }
}

template <class V>
void attention_values(const float* p, int64_t ldp, int64_t num_q, const float* row_scale,
                      const void* rows, DType rows_dtype, int64_t row_stride, int64_t num_rows,
                      int64_t n, float* acc, int64_t lda) {
  with_cache_dtype<V>(rows_dtype, [&]<DType kType>() {
    int64_t i = 0;
    for (; i + kValueRows <= num_q; i += kValueRows) {
      value_rows<V, kType, kValueRows>(p + i * ldp, ldp, row_scale + i, rows, row_stride, num_rows,
                                       n, acc + i * lda, lda);
    }
    if (num_q - i == 2) {
      value_rows<V, kType, 2>(p + i * ldp, ldp, row_scale + i, rows, row_stride, num_rows, n,
                              acc + i * lda, lda);
    } else if (num_q - i == 1) {
      value_rows<V, kType, 1>(p + i * ldp, ldp, row_scale + i, rows, row_stride, num_rows, n,
                              acc + i * lda, lda);
    }
  });
}

}  // namespace pagoda::simd
