// W8A8 / W4A8 on AArch64 (WeightView::int8_activations): the integer matmul of the NEON ISA
// files, written once as templates on the vector traits V (ODR rules as in
// simd/simd_kernels.h). V supplies dot16(acc, a, b): acc's 4 int32 lanes plus the 16 products
// a[i] * b[i] of signed bytes, summed in fours — sdot on CPUs with the dot product (Kunpeng
// 920, Neoverse N1), smull + smlal + sadalp on plain Armv8.0-A. ARM's dot product is signed
// x signed, so neither x86's sign trick nor its +128 bias is needed: int8 weights meet int8
// activations directly, and int4 values (0..15) are signed bytes as they are.
//
// The arithmetic is the scalar table's (scalar.cpp), term for term: activations quantized per
// block (the weight's group for int8, 32 values for int4) with d = absmax / 127 and q =
// round-to-nearest-even(x * (127 / absmax)); per block an exact int32 dot product, then
//   int8: block = scale_g * dot          int4: block = scale_g * dot (+ min_g * Σ q_x)
//   acc += d_b * block                   (symmetric int4: dot - 8 Σ q_x, no min term)
// as separate multiplies and adds in block order (the build does not contract them into
// FMAs: ISO C++ mode), 4 rows at a time in the lanes of a vector. So every row's result is
// the scalar table's bits, whatever tile computes it: batch- and thread-split invariant.
//
// Tiles: 4 rows (lanes) x kTokens tokens; per block each row's weights are loaded once and
// used by every token of the tile (32 int8 values = 2 q registers; 32 int4 values = 16 bytes,
// split into low and high nibbles). Decode (few tokens) streams the rows with one token per
// tile; many tokens take tiles of V::kIntTileTokens while the 4 rows stay in L1.
#pragma once

#include <arm_neon.h>

#include <cstdint>

#include "kernels/activation_reuse.h"
#include "kernels/simd/simd_kernels.h"

namespace pagoda::arm {

using simd::kQuantBlock;
using simd::Scratch;

// One call's activations: q [num_tokens, cols] in natural order, d [num_tokens, num_blocks];
// int4 also sum_q [num_tokens, num_blocks] = Σ q_x per block (the min term's and the
// symmetric bias's factor).
struct QuantizedActivations {
  const int8_t* q = nullptr;
  const float* d = nullptr;
  const int32_t* sum_q = nullptr;
  int64_t cols = 0, block = 0, num_blocks = 0;
};

// What a call's activations were quantized from; a later call on this thread in the same
// ActivationReuseScope with an equal key reuses them (a template, so each ISA file keeps its
// own copy).
template <class V>
struct ActivationKey {
  const float* x = nullptr;
  int64_t num_tokens = 0, cols = 0, block = 0;
  uint64_t scope = 0;
  bool operator==(const ActivationKey&) const = default;
  bool reusable(const ActivationKey& kept) const { return scope != 0 && *this == kept; }
};

// Quantizes x [num_tokens, cols] in blocks of `block` values into per-thread scratch. The
// maximum is exact, 127 / absmax and x * inv are single IEEE operations, and fcvtns rounds
// to nearest even like nearbyint: the scalar table's values.
template <class V>
QuantizedActivations quantize_activations(const float* x, int64_t num_tokens, int64_t cols,
                                          int64_t block) {
  static thread_local Scratch<V> scratch;
  static thread_local ActivationKey<V> kept_key;
  static thread_local QuantizedActivations kept;
  const ActivationKey<V> key{x, num_tokens, cols, block, activation_reuse_scope()};
  if (key.reusable(kept_key)) return kept;
  QuantizedActivations qa;
  qa.cols = cols;
  qa.block = block;
  qa.num_blocks = cols / block;
  const int64_t q_bytes = (num_tokens * cols + 63) & ~int64_t{63};
  const int64_t d_bytes = (num_tokens * qa.num_blocks * 4 + 63) & ~int64_t{63};
  auto* base = static_cast<char*>(
      scratch.get(static_cast<size_t>(q_bytes + d_bytes + num_tokens * qa.num_blocks * 4)));
  auto* q = reinterpret_cast<int8_t*>(base);
  auto* d = reinterpret_cast<float*>(base + q_bytes);
  auto* sum_q = reinterpret_cast<int32_t*>(base + q_bytes + d_bytes);
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t b = 0; b < qa.num_blocks; ++b) {
      const float* src = x + t * cols + b * block;
      float32x4_t m = vdupq_n_f32(0.0f);
      for (int64_t i = 0; i < block; i += 4) m = vmaxq_f32(m, vabsq_f32(vld1q_f32(src + i)));
      const float absmax = vmaxvq_f32(m);
      const float32x4_t inv = vdupq_n_f32(absmax > 0.0f ? 127.0f / absmax : 0.0f);
      d[t * qa.num_blocks + b] = absmax / 127.0f;
      int8_t* out = q + t * cols + b * block;
      int32x4_t sum = vdupq_n_s32(0);
      for (int64_t i = 0; i < block; i += 8) {
        const int32x4_t lo = vcvtnq_s32_f32(vmulq_f32(vld1q_f32(src + i), inv));
        const int32x4_t hi = vcvtnq_s32_f32(vmulq_f32(vld1q_f32(src + i + 4), inv));
        sum = vaddq_s32(sum, vaddq_s32(lo, hi));
        const int16x8_t h = vcombine_s16(vmovn_s32(lo), vmovn_s32(hi));  // |q| <= 127: exact
        vst1_s8(out + i, vmovn_s16(h));
      }
      sum_q[t * qa.num_blocks + b] = vaddvq_s32(sum);
    }
  }
  qa.q = q;
  qa.d = d;
  qa.sum_q = sum_q;
  kept_key = key;
  kept = qa;
  return qa;
}

// [sum of a, sum of b, sum of c, sum of e]: one row's dot product per lane.
template <class V>
inline int32x4_t fold_4_rows(int32x4_t a, int32x4_t b, int32x4_t c, int32x4_t e) {
  return vpaddq_s32(vpaddq_s32(a, b), vpaddq_s32(c, e));
}

// Finishes one block for one token, 4 rows in the lanes: `dot` holds the rows' exact integer
// sums; the float steps are the scalar table's, in its order (every tile calls this, so every
// tile gives the same bits).
template <class V, DType kType>
inline float32x4_t finish_block(float32x4_t acc, int32x4_t dot, const QuantizedActivations& qa,
                                int64_t token, int64_t b, bool symmetric_int4, float32x4_t scale,
                                float32x4_t min) {
  const int32_t sum_q = qa.sum_q[token * qa.num_blocks + b];
  if (kType == DType::kI4 && symmetric_int4) dot = vsubq_s32(dot, vdupq_n_s32(8 * sum_q));
  float32x4_t value = vmulq_f32(scale, vcvtq_f32_s32(dot));
  if (kType == DType::kI4 && !symmetric_int4) {
    value = vaddq_f32(value, vmulq_f32(min, vdupq_n_f32(static_cast<float>(sum_q))));
  }
  const float d = qa.d[token * qa.num_blocks + b];
  return vaddq_f32(acc, vmulq_f32(vdupq_n_f32(d), value));
}

// Rows [row, row + num_rows) (num_rows <= 4) x kTokens tokens from `token`. Kept out of line
// (one call covers whole rows) so that the disassembly names each tile: the instruction counts
// of bench/peers/aarch64_inner_loops.py find the tiles by name (the smmla and fp16 tiles too). Rows
// past num_rows repeat the last row (computed, never stored), so every row takes the same lanes and
// operations in every tile.
template <class V, DType kType, int kTokens>
[[gnu::noinline]] void int_tile(const QuantizedActivations& qa, int64_t token, const WeightView& w,
                                int64_t row, int64_t num_rows, float* y, int64_t ldy) {
  const int64_t cols = qa.cols, block = qa.block, num_groups = cols / w.group_size;
  const int64_t row_bytes = kType == DType::kI8 ? cols : cols / 2;
  int64_t rows[4];  // the tile's rows, the last one repeated past num_rows
  const uint8_t* w_row[4];
  for (int r = 0; r < 4; ++r) {
    rows[r] = row + (r < num_rows ? r : num_rows - 1);
    w_row[r] = static_cast<const uint8_t*>(w.data) + rows[r] * row_bytes;
  }
  const bool asymmetric_int4 = kType == DType::kI4 && !w.symmetric_int4;
  float32x4_t acc[kTokens];
  for (int t = 0; t < kTokens; ++t) acc[t] = vdupq_n_f32(0.0f);
  for (int64_t b = 0; b < qa.num_blocks; ++b) {
    const int64_t g = b * block / w.group_size;
    uint16_t s[4], m[4] = {};  // fp16 bits; fcvtl widens them exactly
    for (int r = 0; r < 4; ++r) {
      s[r] = w.scales[rows[r] * num_groups + g];
      if (asymmetric_int4) m[r] = w.mins[rows[r] * num_groups + g];
    }
    const float32x4_t scale = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(s)));
    const float32x4_t min = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(m)));
    int32x4_t dots[4][kTokens];
    for (int r = 0; r < 4; ++r) {
      for (int t = 0; t < kTokens; ++t) dots[r][t] = vdupq_n_s32(0);
    }
    for (int64_t c = b * block; c < (b + 1) * block; c += kQuantBlock) {
      if constexpr (kTokens == 1) {  // decode: 4 row streams from DRAM, 256 values ahead
        const int64_t ahead = c + 8 * kQuantBlock;
        for (int r = 0; r < 4; ++r) {
          V::prefetch_l2(w_row[r] + (kType == DType::kI8 ? ahead : ahead / 2));
        }
      }
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
      for (int t = 0; t < kTokens; ++t) {
        const int8_t* xq = qa.q + (token + t) * cols + c;
        const int8x16_t x_lo = vld1q_s8(xq), x_hi = vld1q_s8(xq + 16);
        for (int r = 0; r < 4; ++r) {
          dots[r][t] = V::dot16(V::dot16(dots[r][t], lo[r], x_lo), hi[r], x_hi);
        }
      }
    }
    for (int t = 0; t < kTokens; ++t) {
      const int32x4_t dot = fold_4_rows<V>(dots[0][t], dots[1][t], dots[2][t], dots[3][t]);
      acc[t] = finish_block<V, kType>(acc[t], dot, qa, token + t, b, w.symmetric_int4, scale, min);
    }
  }
  for (int t = 0; t < kTokens; ++t) {
    float rows4[4];
    vst1q_f32(rows4, acc[t]);
    for (int r = 0; r < num_rows; ++r) y[t * ldy + r] = rows4[r];
  }
}

// Below this many tokens each tile takes one token (decode); from it on, tiles of
// V::kIntTileTokens share each load of 4 rows' weights.
constexpr int64_t kIntManyTokens = 4;

// The many-token tile of the files whose V has kMatrixMultiply (smmla, FEAT_I8MM): defined in
// arm/i8mm_kernels.h, which only they include. x_pairs holds the call's activations as token
// pairs (pair_activations there).
template <class V, DType kType, int kPairs>
void mmla_tile(const QuantizedActivations& qa, const int8_t* x_pairs, int64_t token,
               int64_t num_tokens, const WeightView& w, int64_t row, int64_t num_rows, float* y,
               int64_t ldy);
template <class V>
const int8_t* pair_activations(const QuantizedActivations& qa, int64_t num_tokens);

// int8 and int4 on lane panels packed at load (WeightView::lane_panels), for the files whose V
// sets kInt8PanelRowBytes: defined in arm/int8_panels.h, which only they include.
template <class V>
void matmul_int8_panels(const float* x, int64_t num_tokens, const WeightView& w, int64_t row_begin,
                        int64_t row_end, float* y, int64_t ldy);

template <class V, DType kType>
void matmul_int8_activations_typed(const float* x, int64_t num_tokens, const WeightView& w,
                                   int64_t row_begin, int64_t row_end, float* y, int64_t ldy) {
  const int64_t block = kType == DType::kI8 ? w.group_size : kQuantBlock;
  const QuantizedActivations qa = quantize_activations<V>(x, num_tokens, w.cols, block);
  const int64_t tile_tokens = num_tokens < kIntManyTokens ? 1 : V::kIntTileTokens;
  const int8_t* x_pairs = nullptr;
  if constexpr (V::kMatrixMultiply) {
    if (tile_tokens > 1) x_pairs = pair_activations<V>(qa, num_tokens);
  }
  for (int64_t r = row_begin; r < row_end; r += 4) {
    const int64_t rows = simd::min_i64<V>(4, row_end - r);
    for (int64_t t = 0; t < num_tokens; t += tile_tokens) {
      const int64_t tokens = simd::min_i64<V>(tile_tokens, num_tokens - t);
      if constexpr (V::kMatrixMultiply) {
        if (tile_tokens > 1) {
          simd::with_tile_shape<V, 1, V::kIntTileTokens / 2>(
              1, (tokens + 1) / 2, [&]<int R, int P>() {
                mmla_tile<V, kType, P>(qa, x_pairs, t, num_tokens, w, r, rows, y + t * ldy + r,
                                       ldy);
              });
          continue;
        }
      }
      simd::with_tile_shape<V, 1, V::kIntTileTokens>(1, tokens, [&]<int R, int T>() {
        int_tile<V, kType, T>(qa, t, w, r, rows, y + t * ldy + r, ldy);
      });
    }
  }
}

}  // namespace pagoda::arm

namespace pagoda::simd {

// The entry point declared in simd/quant_kernels.h.
template <class V>
void matmul_int8_activations(const float* x, int64_t num_tokens, const WeightView& w,
                             int64_t row_begin, int64_t row_end, float* y, int64_t ldy) {
  if constexpr (V::kInt8PanelRowBytes > 0) {
    if (w.lane_panels != nullptr) {
      arm::matmul_int8_panels<V>(x, num_tokens, w, row_begin, row_end, y, ldy);
      return;
    }
  }
  if (w.dtype == DType::kI8) {
    arm::matmul_int8_activations_typed<V, DType::kI8>(x, num_tokens, w, row_begin, row_end, y, ldy);
  } else {
    arm::matmul_int8_activations_typed<V, DType::kI4>(x, num_tokens, w, row_begin, row_end, y, ldy);
  }
}

}  // namespace pagoda::simd
