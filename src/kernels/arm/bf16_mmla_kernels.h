// bf16 weights on bfmmla (FEAT_BF16, as bfdot: Neoverse V1 / N2, Graviton 3; not Kunpeng 920)
// for prefill and batched decode, and the table's bf16 matmul: one token keeps the bfdot tile
// of arm/bf16_kernels.h, two or more take the tiles here.
//
// bfmmla multiplies a 2 x 4 bf16 matrix by a 4 x 2 one into a 2 x 2 fp32 block: 16
// multiply-adds per instruction where bfdot does 8. The Arm ARM defines it (BFMatMulAdd) as,
// for each of the 4 results on its own, two BFDotAdd steps: add the pair of products of
// columns 0, 1, then of columns 2, 3, each step rounding as bfdot's one step does. So no value
// of one token (row) enters another's result, and a result equals bfdot's exactly when each
// of its steps gets the same pairs in the same order as a bfdot lane would.
//
// That is how the tiles are laid out. bfdot's lane l adds the pair at columns 8s + 2l, +1 of
// step s = 0, 1, 2, ... Here each 2 x 2 block keeps 4 accumulators, one per lane l, and one
// bfmmla advances lane l by two steps: per 32 columns (4 steps), ld4 on 32-bit pairs gives
// each row's lane l as [step 0, 1, 2, 3], and zip1 / zip2 on 64-bit halves join two rows into
// the operands of steps 0-1 and 2-3. The activations are arranged the same way once per call
// (pair_bf16_activations). At the end of a tile a 4 x 4 transpose turns the lane accumulators
// into bfdot's (one vector of 4 lanes per row and token); the last n mod 32 columns run on
// bfdot (bf16_dot_columns) and the lanes are summed in faddp's order: every row and token gets
// the bits of the bfdot tile, whatever tile shape, batch or thread share it falls in.
//
// Tile: 2 rows (a single last row is paired with itself, computed, never stored) x up to 8
// tokens (4 token pairs; an odd last token likewise): 16 accumulators, the 8 registers of the
// two ld4 (8 operands once zipped) and 2 activation registers fit the 32 q registers. 4 rows x
// 4 tokens would keep as many accumulators but need twice the operands live.
#pragma once

#include <arm_neon.h>

#include <cstdint>

#include "kernels/arm/bf16_kernels.h"
#include "kernels/simd/simd_kernels.h"

namespace pagoda::arm {

constexpr int64_t kBf16MmlaColumns = 32;  // one ld4 of 4 x 32-bit pairs per row
constexpr int kBf16MmlaTilePairs = 4;     // 8 tokens
constexpr int64_t kBf16MmlaMinTokens = 2;

// The bf16 activations xb ([num_tokens, ldx]) as bfmmla's second operands, for the first
// num_chunks * 32 columns: chunk m, token pair p, lane l at ((m * num_pairs + p) * 4 + l) * 16,
// 16 values: token 2p's pairs of steps 0 and 1 of lane l, token 2p + 1's (the last token again
// when num_tokens is odd), then the same for steps 2 and 3. A tile finds its token pairs side
// by side in each chunk, the two operands of one lane in one ldp.
template <class V>
const bfloat16_t* pair_bf16_activations(const bfloat16_t* xb, int64_t ldx, int64_t num_tokens,
                                        int64_t num_chunks) {
  static thread_local simd::Scratch<V> scratch;
  const int64_t num_pairs = (num_tokens + 1) / 2;
  auto* out = static_cast<uint32_t*>(scratch.get(
      static_cast<size_t>(num_chunks * num_pairs * kBf16MmlaColumns * 2 * sizeof(bfloat16_t))));
  for (int64_t p = 0; p < num_pairs; ++p) {
    const auto* first = reinterpret_cast<const uint32_t*>(xb + 2 * p * ldx);
    const auto* second =
        reinterpret_cast<const uint32_t*>(xb + simd::min_i64<V>(2 * p + 1, num_tokens - 1) * ldx);
    for (int64_t m = 0; m < num_chunks; ++m) {
      const uint32x4x4_t a = vld4q_u32(first + m * 16);
      const uint32x4x4_t b = vld4q_u32(second + m * 16);
      uint32_t* dst = out + (m * num_pairs + p) * kBf16MmlaColumns;  // 32 pairs: 2 tokens x 16
      for (int l = 0; l < 4; ++l) {
        const uint64x2_t a_l = vreinterpretq_u64_u32(a.val[l]);
        const uint64x2_t b_l = vreinterpretq_u64_u32(b.val[l]);
        vst1q_u32(dst + l * 8, vreinterpretq_u32_u64(vzip1q_u64(a_l, b_l)));
        vst1q_u32(dst + l * 8 + 4, vreinterpretq_u32_u64(vzip2q_u64(a_l, b_l)));
      }
    }
  }
  return reinterpret_cast<const bfloat16_t*>(out);
}

// xq = the 16 values at p, then p += 16: one ldp with a post-increment. (GCC 12 computes each
// address of an unrolled run of vld1q_bf16_x2 from the base with an add of its own.)
[[gnu::always_inline]] inline void load_32_bytes_and_advance(bfloat16x8x2_t& xq,
                                                             const bfloat16_t*& p) {
  __asm__("ldp %q0, %q1, [%2], #32"
          : "=w"(xq.val[0]), "=w"(xq.val[1]), "+r"(p)
          : "m"(*reinterpret_cast<const uint8_t(*)[32]>(p)));
}

// y[t * ldy + r] for rows 0 and 1 of w (row 1 only if num_rows is 2; rows at stride ldw, n
// values each) and tokens [token, token + 2 kPairs) below num_tokens (token even); x_pairs is
// pair_bf16_activations' output for num_pairs pairs, xb / ldx the rounded activations it came
// from.
// GCC's scheduling before register allocation hoists the activation loads of the whole chunk
// and then spills them and shuffles accumulators (aarch64 GCC 12: 120 instructions a chunk
// instead of 82); the loop is written in the order it should run.
#if defined(__GNUC__) && !defined(__clang__)
#define PAGODA_NO_PRE_RA_SCHEDULING [[gnu::optimize("no-schedule-insns")]]
#else
#define PAGODA_NO_PRE_RA_SCHEDULING
#endif

template <class V, int kPairs>
[[gnu::noinline]] PAGODA_NO_PRE_RA_SCHEDULING void bf16_mmla_tile(
    const bfloat16_t* x_pairs, int64_t num_pairs, const bfloat16_t* xb, int64_t ldx, int64_t token,
    int64_t num_tokens, const uint16_t* w, int64_t ldw, int64_t n, int64_t num_rows, bool prefetch,
    float* y, int64_t ldy) {
  constexpr int kTokens = 2 * kPairs;
  const uint16_t* const w_rows[2] = {w, w + (num_rows > 1 ? ldw : 0)};
  const bfloat16_t* x_rows[kTokens];
  for (int t = 0; t < kTokens; ++t) {
    x_rows[t] = xb + simd::min_i64<V>(token + t, num_tokens - 1) * ldx;
  }
  const int64_t num_chunks = n / kBf16MmlaColumns;
  const int64_t chunk_stride = num_pairs * 2 * kBf16MmlaColumns;  // elements
  // (No chunks, no pairs: x_pairs may be null then.)
  const bfloat16_t* xc = num_chunks == 0 ? x_pairs : x_pairs + (token / 2) * 2 * kBf16MmlaColumns;

  // acc[q][l]: lane l of [row 0 . token 2q, row 0 . token 2q + 1, row 1 . token 2q,
  // row 1 . token 2q + 1]. (Loops with #pragma GCC unroll: unrolled early enough for the
  // arrays to live in registers.)
  float32x4_t acc[kPairs][4];
#pragma GCC unroll 4
  for (int q = 0; q < kPairs; ++q) {
#pragma GCC unroll 4
    for (int l = 0; l < 4; ++l) acc[q][l] = vdupq_n_f32(0.0f);
  }
  for (int64_t c = 0; c < num_chunks * kBf16MmlaColumns; c += kBf16MmlaColumns) {
    if (prefetch) {  // one 64-byte line of each row per chunk, 1 KiB ahead
      V::prefetch_l2(w_rows[0] + c + 512);
      V::prefetch_l2(w_rows[1] + c + 512);
    }
    const uint32x4x4_t a = vld4q_u32(reinterpret_cast<const uint32_t*>(w_rows[0] + c));
    const uint32x4x4_t b = vld4q_u32(reinterpret_cast<const uint32_t*>(w_rows[1] + c));
    bfloat16x8_t steps01[4], steps23[4];  // per lane: the two operands of rows 0 and 1
#pragma GCC unroll 4
    for (int l = 0; l < 4; ++l) {
      const uint64x2_t a_l = vreinterpretq_u64_u32(a.val[l]);
      const uint64x2_t b_l = vreinterpretq_u64_u32(b.val[l]);
      steps01[l] = vreinterpretq_bf16_u64(vzip1q_u64(a_l, b_l));
      steps23[l] = vreinterpretq_bf16_u64(vzip2q_u64(a_l, b_l));
    }
    // Token pairs outer, lanes inner: the activations are read in storage order, 32 bytes
    // per ldp with a post-increment.
    const bfloat16_t* xq_next = xc;
#pragma GCC unroll 4
    for (int q = 0; q < kPairs; ++q) {
#pragma GCC unroll 4
      for (int l = 0; l < 4; ++l) {
        bfloat16x8x2_t xq;
        load_32_bytes_and_advance(xq, xq_next);
        acc[q][l] = vbfmmlaq_f32(acc[q][l], steps01[l], xq.val[0]);
        acc[q][l] = vbfmmlaq_f32(acc[q][l], steps23[l], xq.val[1]);
      }
    }
    xc += chunk_stride;
  }

  // Lanes to bfdot's layout: lanes[r][t] holds the 4 lane sums of row r and token t.
  float32x4_t lanes[2][kTokens];
#pragma GCC unroll 4
  for (int q = 0; q < kPairs; ++q) {
    const float32x4_t(&l)[4] = acc[q];
    const float64x2_t even01 = vreinterpretq_f64_f32(vtrn1q_f32(l[0], l[1]));
    const float64x2_t odd01 = vreinterpretq_f64_f32(vtrn2q_f32(l[0], l[1]));
    const float64x2_t even23 = vreinterpretq_f64_f32(vtrn1q_f32(l[2], l[3]));
    const float64x2_t odd23 = vreinterpretq_f64_f32(vtrn2q_f32(l[2], l[3]));
    lanes[0][2 * q] = vreinterpretq_f32_f64(vzip1q_f64(even01, even23));
    lanes[0][2 * q + 1] = vreinterpretq_f32_f64(vzip1q_f64(odd01, odd23));
    lanes[1][2 * q] = vreinterpretq_f32_f64(vzip2q_f64(even01, even23));
    lanes[1][2 * q + 1] = vreinterpretq_f32_f64(vzip2q_f64(odd01, odd23));
  }
  bf16_dot_columns<V, 2, kTokens>(lanes, w_rows, x_rows, num_chunks * kBf16MmlaColumns, n, false);
  store_bf16_dot_sums<2, kTokens>(lanes, num_rows, num_tokens - token, y, ldy);
}

template <class V>
void matmul_bf16_weights(const float* x, int64_t num_tokens, const WeightView& w, int64_t row_begin,
                         int64_t row_end, float* y, int64_t ldy) {
  const int64_t cols = w.cols, padded = (cols + kBf16Lanes - 1) & ~(kBf16Lanes - 1);
  const bfloat16_t* xb = round_activations_to_bf16<V>(x, num_tokens, cols, padded);
  if (num_tokens < kBf16MmlaMinTokens) {
    matmul_bf16_one_token<V>(xb, w, row_begin, row_end, y);
    return;
  }
  const int64_t num_chunks = cols / kBf16MmlaColumns, num_pairs = (num_tokens + 1) / 2;
  const bfloat16_t* x_pairs = pair_bf16_activations<V>(xb, padded, num_tokens, num_chunks);
  const auto* wb = static_cast<const uint16_t*>(w.data);
  // A single column of tiles reads each weight once, from DRAM: prefetch as decode does.
  const bool prefetch = num_tokens <= 2 * kBf16MmlaTilePairs;
  constexpr decltype(&bf16_mmla_tile<V, 1>) kTiles[] = {bf16_mmla_tile<V, 1>, bf16_mmla_tile<V, 2>,
                                                        bf16_mmla_tile<V, 3>, bf16_mmla_tile<V, 4>};
  for (int64_t r = row_begin; r < row_end; r += 2) {
    const int64_t rows = simd::min_i64<V>(2, row_end - r);
    for (int64_t t = 0; t < num_tokens; t += 2 * kBf16MmlaTilePairs) {
      const int64_t pairs = simd::min_i64<V>(kBf16MmlaTilePairs, (num_tokens - t + 1) / 2);
      kTiles[pairs - 1](x_pairs, num_pairs, xb, padded, t, num_tokens, wb + r * cols, cols, cols,
                        rows, prefetch, y + t * ldy + r, ldy);
    }
  }
}

// The table's matmul: bf16 weights here, every other dtype by kRest.
template <class V, auto kRest>
void matmul_bf16_dot(const float* x, int64_t num_tokens, const WeightView& w, int64_t row_begin,
                     int64_t row_end, float* y, int64_t ldy) {
  if (w.dtype == DType::kBF16) {
    matmul_bf16_weights<V>(x, num_tokens, w, row_begin, row_end, y, ldy);
  } else {
    kRest(x, num_tokens, w, row_begin, row_end, y, ldy);
  }
}

}  // namespace pagoda::arm
