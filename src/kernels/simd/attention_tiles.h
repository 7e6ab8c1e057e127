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
//
// The horizontal sum that ends each score is the costly part of a row-layout product (on
// AVX-512 as many shuffles and adds as the 8 FMAs of a 128-wide head). Where the traits offer
// reduce_add_each (x86), a whole vector of cache rows is summed at once with the same pairings
// as reduce_add, so the bits stay dot_rows' while a third of the work remains.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <utility>

#include "kernels/kernels.h"

namespace pagoda::simd {

// Scores of R query rows against C cache rows (the first at element `index`): R x C pairs of
// accumulators, one vector of every query row and cache row loaded per step. Each score is
// computed exactly as dot_rows computes it (simd_kernels.h), so a position's score does not
// depend on whether its token is decoded alone (dot_rows) or verified or prefilled with others
// (this tile): the vector steps go in pairs, the first of each pair into acc0 and the second
// into acc1, the steps after the last pair into acc0, then reduce_add(acc0 + acc1).
template <class V, DType kType, int R, int C, class Finish>
inline void score_tile_sums(const float* q, int64_t ldq, const void* rows, int64_t index,
                            int64_t row_stride, int64_t n, Finish&& finish) {
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
    for (int c = 0; c < C; ++c) finish(r, c, V::add(acc0[r][c], acc1[r][c]));
  }
}

// The tile with each score reduced on its own: s[r * lds + c].
template <class V, DType kType, int R, int C>
inline void score_tile(const float* q, int64_t ldq, const void* rows, int64_t index,
                       int64_t row_stride, int64_t n, float* s, int64_t lds) {
  score_tile_sums<V, kType, R, C>(
      q, ldq, rows, index, row_stride, n,
      [&](int r, int c, typename V::F sum) { s[r * lds + c] = V::reduce_add(sum); });
}

template <class V>
concept ReducesEach = requires(const typename V::F* v) {
  { V::reduce_add_each(v) } -> std::same_as<typename V::F>;
};

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
  if constexpr (ReducesEach<V>) {
    // A lane's worth of cache rows: the tiles' unreduced sums kept per query row, then one
    // reduce_add_each per query row stores kLanes scores.
    using F = typename V::F;
    constexpr int kL = V::kLanes;
    static_assert(kL % kCols == 0);
    for (; j + kL <= num_rows; j += kL) {
      F sums[R][kL];
      for (int c0 = 0; c0 < kL; c0 += kCols) {
        score_tile_sums<V, kType, R, kCols>(q, ldq, rows, (j + c0) * row_stride, row_stride, n,
                                            [&](int r, int c, F sum) { sums[r][c0 + c] = sum; });
      }
      for (int r = 0; r < R; ++r) V::store(s + r * lds + j, V::reduce_add_each(sums[r]));
    }
  }
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

// The value rows of a key tile: row j is row j % block_rows of blocks[j / block_rows].
struct ValueBlocks {
  const void* const* blocks;
  int64_t block_rows, row_stride, num_rows;
};

// acc of R query rows, C vectors wide from dim d (the last one m lanes when kPartial): rescaled,
// then every cache row's vectors, block by block, loaded once and multiplied by each query
// row's weight. The accumulators stay in registers across all the blocks of the key tile.
template <class V, DType kType, int R, int C, bool kPartial>
inline void value_tile(const float* p, int64_t ldp, const float* row_scale, const ValueBlocks& vb,
                       int64_t d, int m, float* acc, int64_t lda) {
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
  for (int64_t j0 = 0; j0 < vb.num_rows; j0 += vb.block_rows) {
    const void* rows = vb.blocks[j0 / vb.block_rows];
    const float* pj = p + j0;
    const int64_t len = std::min(vb.block_rows, vb.num_rows - j0);
    for (int64_t j = 0; j < len; ++j) {
      F v[C];
      for (int c = 0; c < C; ++c) {
        const int64_t at = j * vb.row_stride + d + c * kL;
        v[c] = kPartial ? load_weights_n<V, kType>(rows, at, m) : load_weights<V, kType>(rows, at);
      }
      for (int r = 0; r < R; ++r) {
        const F w = V::set1(pj[r * ldp + j]);
        for (int c = 0; c < C; ++c) a[r][c] = V::fma(w, v[c], a[r][c]);
      }
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

// AVX-512: 6 x 4 accumulators of its 32 registers, with room for a cache vector and the query
// rows' weights, so each widened cache vector (vcvtph2ps competes with the FMAs for the two
// 512-bit ports) serves 6 FMAs instead of 3. Elsewhere 3 x 4: AVX2 has 16 registers, and
// NEON keeps the tile it had (6 rows not measured there).
template <class V>
constexpr int kValueRows = V::kVectorRegisters >= 32 && V::kLanes >= 16 ? 6 : 3;
constexpr int kValueCols = 4;

// R query rows over all n dims: kValueCols vectors at a time, then single vectors, then the
// partial last one.
template <class V, DType kType, int R>
inline void value_rows(const float* p, int64_t ldp, const float* row_scale, const ValueBlocks& vb,
                       int64_t n, float* acc, int64_t lda) {
  constexpr int kL = V::kLanes;
  int64_t d = 0;
  for (; d + kValueCols * kL <= n; d += kValueCols * kL) {
    value_tile<V, kType, R, kValueCols, false>(p, ldp, row_scale, vb, d, kL, acc, lda);
  }
  for (; d + kL <= n; d += kL) {
    value_tile<V, kType, R, 1, false>(p, ldp, row_scale, vb, d, kL, acc, lda);
  }
  if (d < n) {
    value_tile<V, kType, R, 1, true>(p, ldp, row_scale, vb, d, static_cast<int>(n - d), acc, lda);
  }
}

template <class V>
void attention_values(const float* p, int64_t ldp, int64_t num_q, const float* row_scale,
                      const void* const* blocks, int64_t block_rows, DType rows_dtype,
                      int64_t row_stride, int64_t num_rows, int64_t n, float* acc, int64_t lda) {
  const ValueBlocks vb{blocks, block_rows, row_stride, num_rows};
  with_cache_dtype<V>(rows_dtype, [&]<DType kType>() {
    int64_t i = 0;
    constexpr int kRows = kValueRows<V>;
    for (; i + kRows <= num_q; i += kRows) {
      value_rows<V, kType, kRows>(p + i * ldp, ldp, row_scale + i, vb, n, acc + i * lda, lda);
    }
    // The last 1 .. kRows - 1 rows: one tile of that height.
    [&]<int... kTail>(std::integer_sequence<int, kTail...>) {
      const auto tail = static_cast<int>(num_q - i);
      (void)((tail == kTail + 1 && (value_rows<V, kType, kTail + 1>(p + i * ldp, ldp, row_scale + i,
                                                                    vb, n, acc + i * lda, lda),
                                    true)) ||
             ...);
    }
    (std::make_integer_sequence<int, kRows - 1>{});
  });
}

}  // namespace pagoda::simd
