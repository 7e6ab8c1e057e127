// The many-token W8A8 / W4A8 tile on smmla (Armv8.6-A FEAT_I8MM, optional from Armv8.2-A:
// Neoverse V1 / N2, Graviton 3, newer HiSilicon cores; not Kunpeng 920), for prefill and batched
// decode. On row-major weights decode (fewer than kIntManyTokens tokens) keeps the sdot tile of
// arm/int8_kernels.h; on int8 and int4 lane panels decode runs smmla too.
//
// smmla multiplies a 2 x 8 int8 matrix by an 8 x 2 one into a 2 x 2 int32 block: 32
// multiply-adds per instruction where sdot does 16. Here the 2 x 8 operand is 8 columns of
// two weight rows and the 8 x 2 one the same 8 columns of two tokens, so one instruction
// advances 2 rows x 2 tokens by 8 columns, and the result lanes are
//   [row 0 . token 0, row 0 . token 1, row 1 . token 0, row 1 . token 1].
// Two row pairs side by side, uzp1 / uzp2 give each token its 4 rows in the lanes, which is
// what finish_block (int8_kernels.h) takes: the integer sums are exact, so every row and token
// gets the scalar table's bits, as from the sdot tiles (batch invariance holds across both).
//
// Layouts. Row-major weights (int8 and int4 the loader did not pack): per 32 columns each row is
// loaded as two 16-byte vectors (int4: one, split into nibbles) and each row pair is
// interleaved 8 bytes at a time with zip1 / zip2 on 64-bit lanes, once per tile and shared by
// all its tokens. int8 and int4 packed at load into 4 x 8 lane panels (arm/int8_panels.h,
// arm/int4_panels.h) are already interleaved so: mmla_panel_tile below loads the pairs as they
// lie (int4: with a shift or a mask), for every token count. The
// activations are interleaved once per call into token pairs (pair_activations: 8 bytes of token
// 2p, then 8 of token 2p + 1), so a tile loads them ready-made. Tile: 4 rows x up to 8 tokens (4
// pairs): 8 int32 blocks + 8 fp32 accumulators
// + 8 interleaved weight vectors + one activation vector + scales fit the 32 q registers.
#pragma once

#include <arm_neon.h>

#include <cstdint>

#include "kernels/arm/int8_kernels.h"
#include "kernels/arm/int8_panels.h"

namespace pagoda::arm {

// qa's tokens as pairs: pair p at [p * 2 * cols], and in it 8 columns of token 2p then the
// same 8 of token 2p + 1 (the last token twice when num_tokens is odd). cols is a multiple of
// 32 (quantized layouts).
template <class V>
const int8_t* pair_activations(const QuantizedActivations& qa, int64_t num_tokens) {
  static thread_local Scratch<V> scratch;
  const int64_t cols = qa.cols, num_pairs = (num_tokens + 1) / 2;
  auto* out = static_cast<int8_t*>(scratch.get(static_cast<size_t>(num_pairs * 2 * cols)));
  for (int64_t p = 0; p < num_pairs; ++p) {
    const int8_t* first = qa.q + 2 * p * cols;
    const int8_t* second = qa.q + simd::min_i64<V>(2 * p + 1, num_tokens - 1) * cols;
    int8_t* dst = out + p * 2 * cols;
    for (int64_t c = 0; c < cols; c += 16) {
      const int64x2_t a = vreinterpretq_s64_s8(vld1q_s8(first + c));
      const int64x2_t b = vreinterpretq_s64_s8(vld1q_s8(second + c));
      vst1q_s8(dst + 2 * c, vreinterpretq_s8_s64(vzip1q_s64(a, b)));
      vst1q_s8(dst + 2 * c + 16, vreinterpretq_s8_s64(vzip2q_s64(a, b)));
    }
  }
  return out;
}

// Rows [row, row + num_rows) (num_rows <= 4; the last repeated, computed, never stored) x
// token pairs [token / 2, token / 2 + kPairs) (token even); only tokens below num_tokens are
// stored.
template <class V, DType kType, int kPairs>
[[gnu::noinline]] void mmla_tile(const QuantizedActivations& qa, const int8_t* x_pairs,
                                 int64_t token, int64_t num_tokens, const WeightView& w,
                                 int64_t row, int64_t num_rows, float* y, int64_t ldy) {
  const int64_t cols = qa.cols, block = qa.block, num_groups = cols / w.group_size;
  const int64_t row_bytes = kType == DType::kI8 ? cols : cols / 2;
  int64_t rows[4];
  const uint8_t* w_row[4];
  for (int r = 0; r < 4; ++r) {
    rows[r] = row + (r < num_rows ? r : num_rows - 1);
    w_row[r] = static_cast<const uint8_t*>(w.data) + rows[r] * row_bytes;
  }
  // The tile's tokens; a pair's second past num_tokens repeats the last token (its data in
  // x_pairs does too), so its scales are read in range.
  int64_t tokens[2 * kPairs];
  for (int t = 0; t < 2 * kPairs; ++t) tokens[t] = simd::min_i64<V>(token + t, num_tokens - 1);
  const int8_t* xp = x_pairs + token * cols;  // pair token / 2 starts at (token / 2) * 2 * cols
  const bool asymmetric_int4 = kType == DType::kI4 && !w.symmetric_int4;
  const auto zip_lo = [](int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
  };
  const auto zip_hi = [](int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
  };
  float32x4_t acc[2 * kPairs];
  for (int t = 0; t < 2 * kPairs; ++t) acc[t] = vdupq_n_f32(0.0f);
  for (int64_t b = 0; b < qa.num_blocks; ++b) {
    const int64_t g = b * block / w.group_size;
    uint16_t s[4], m[4] = {};
    for (int r = 0; r < 4; ++r) {
      s[r] = w.scales[rows[r] * num_groups + g];
      if (asymmetric_int4) m[r] = w.mins[rows[r] * num_groups + g];
    }
    const float32x4_t scale = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(s)));
    const float32x4_t min = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(m)));
    int32x4_t mm[2][kPairs];
    for (int p = 0; p < 2; ++p) {
      for (int q = 0; q < kPairs; ++q) mm[p][q] = vdupq_n_s32(0);
    }
    for (int64_t c = b * block; c < (b + 1) * block; c += kQuantBlock) {
      int8x16_t lo[4], hi[4];  // values c..c+15 and c+16..c+31 of each row
      for (int r = 0; r < 4; ++r) {
        if constexpr (kType == DType::kI8) {
          lo[r] = vld1q_s8(reinterpret_cast<const int8_t*>(w_row[r] + c));
          hi[r] = vld1q_s8(reinterpret_cast<const int8_t*>(w_row[r] + c + 16));
        } else {  // a run of 32: byte j holds value j (low nibble) and j + 16 (high nibble)
          const uint8x16_t packed = vld1q_u8(w_row[r] + c / 2);
          lo[r] = vreinterpretq_s8_u8(vandq_u8(packed, vdupq_n_u8(15)));
          hi[r] = vreinterpretq_s8_u8(vshrq_n_u8(packed, 4));
        }
      }
      // a[p][k]: columns c + 8k .. c + 8k + 7 of rows 2p and 2p + 1.
      int8x16_t a[2][4];
      for (int p = 0; p < 2; ++p) {
        a[p][0] = zip_lo(lo[2 * p], lo[2 * p + 1]);
        a[p][1] = zip_hi(lo[2 * p], lo[2 * p + 1]);
        a[p][2] = zip_lo(hi[2 * p], hi[2 * p + 1]);
        a[p][3] = zip_hi(hi[2 * p], hi[2 * p + 1]);
      }
      for (int q = 0; q < kPairs; ++q) {
        const int8_t* xq = xp + q * 2 * cols + 2 * c;
        for (int k = 0; k < 4; ++k) {
          const int8x16_t x = vld1q_s8(xq + 16 * k);
          mm[0][q] = vmmlaq_s32(mm[0][q], a[0][k], x);
          mm[1][q] = vmmlaq_s32(mm[1][q], a[1][k], x);
        }
      }
    }
    for (int q = 0; q < kPairs; ++q) {
      const int32x4_t first = vuzp1q_s32(mm[0][q], mm[1][q]);  // token 2q, rows 0..3
      const int32x4_t second = vuzp2q_s32(mm[0][q], mm[1][q]);
      acc[2 * q] = finish_block<V, kType>(acc[2 * q], first, qa, tokens[2 * q], b, w.symmetric_int4,
                                          scale, min);
      acc[2 * q + 1] = finish_block<V, kType>(acc[2 * q + 1], second, qa, tokens[2 * q + 1], b,
                                              w.symmetric_int4, scale, min);
    }
  }
  const int64_t num_valid = simd::min_i64<V>(2 * kPairs, num_tokens - token);
  for (int t = 0; t < num_valid; ++t) {
    float rows4[4];
    vst1q_f32(rows4, acc[t]);
    for (int r = 0; r < num_rows; ++r) y[t * ldy + r] = rows4[r];
  }
}

}  // namespace pagoda::arm

namespace pagoda::arm {

// The smmla tile on a 4 x 8 lane panel (arm/int8_panels.h), declared there: the tile above with
// the row pairs loaded as packed (a[p][k] is one 16-byte load; int4: half of one, shifted or
// masked out of it, arm/int4_panels.h) instead of zipped, and the 4 rows' scales one load.
// Decode (one token) is one pair whose second token repeats the first, and only the first is
// finished.
template <class V, PanelValues kValues, int kTokens, bool kGroup32>
[[gnu::noinline]] void mmla_panel_tile(const QuantizedActivations& qa, const int8_t* x_pairs,
                                       int64_t token, const Int8Panel& panel, int64_t first,
                                       int64_t count, float* y, int64_t ldy) {
  constexpr int kPairs = (kTokens + 1) / 2;
  constexpr int64_t kStepBytes = kPanelStepBytes<kValues>;
  const int64_t cols = qa.cols, num_blocks = qa.num_blocks;
  const int64_t block = kGroup32 || is_int4(kValues) ? kQuantBlock : qa.block;
  const int64_t blocks_per_group = kGroup32 ? 1 : panel.blocks_per_group;
  const int8_t* const values = panel.values;
  const int8_t* const xp = x_pairs + token * cols;  // pair token / 2 at (token / 2) * 2 * cols
  const float* const d = qa.d + token * num_blocks;
  const int32_t* const sum_q = qa.sum_q + token * num_blocks;
  float32x4_t acc[kTokens];
  for (int t = 0; t < kTokens; ++t) acc[t] = vdupq_n_f32(0.0f);
  for (int64_t g = 0; g < num_blocks / blocks_per_group; ++g) {
    const float32x4_t scale = panel_plane(panel.scales, g);
    const float32x4_t min =
        kValues == PanelValues::kInt4Mins ? panel_plane(panel.mins, g) : vdupq_n_f32(0.0f);
    for (int64_t b = g * blocks_per_group; b < (g + 1) * blocks_per_group; ++b) {
      int32x4_t mm[2][kPairs];
      for (int p = 0; p < 2; ++p) {
        for (int q = 0; q < kPairs; ++q) mm[p][q] = vdupq_n_s32(0);
      }
      for (int64_t c = b * block; c < (b + 1) * block; c += kQuantBlock) {
        const int8_t* wc = values + c * (kStepBytes / kQuantBlock);  // 32 values of 4 rows
        if constexpr (kTokens <= 2) {  // decode: one stream from DRAM, 16 steps ahead
          V::prefetch_l2(wc + 16 * kStepBytes);
          if constexpr (kStepBytes > 64) V::prefetch_l2(wc + 16 * kStepBytes + 64);
        }
        int8x16_t v[8];  // v[2k + p]: values c + 8k .. c + 8k + 7 of rows 2p and 2p + 1
        panel_step<kValues>(wc, v);
        for (int q = 0; q < kPairs; ++q) {
          const int8_t* xq = xp + q * 2 * cols + 2 * c;
          for (int k = 0; k < 4; ++k) {
            const int8x16_t x = vld1q_s8(xq + 16 * k);
            mm[0][q] = vmmlaq_s32(mm[0][q], v[2 * k], x);
            mm[1][q] = vmmlaq_s32(mm[1][q], v[2 * k + 1], x);
          }
        }
      }
      for (int t = 0; t < kTokens; ++t) {
        // Token 2q's rows 0..3 are the even lanes of the pair's two blocks, token 2q + 1's the
        // odd.
        const int32x4_t dot = t % 2 == 0 ? vuzp1q_s32(mm[0][t / 2], mm[1][t / 2])
                                         : vuzp2q_s32(mm[0][t / 2], mm[1][t / 2]);
        acc[t] = finish_panel_block<kValues>(acc[t], dot, scale, min, d[t * num_blocks + b],
                                             sum_q[t * num_blocks + b]);
      }
    }
  }
  store_panel_rows<kTokens>(acc, kTokens, first, count, y, ldy);
}

}  // namespace pagoda::arm
