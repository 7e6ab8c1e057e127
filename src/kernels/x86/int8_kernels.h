// W8A8 / W4A8 on x86 (WeightView::int8_activations): the integer matmul of the x86 ISA files,
// written once as templates on the vector traits V (ODR rules as in simd/simd_kernels.h).
// Included by avx2.cpp / avx512.cpp after simd/simd_kernels.h and before
// simd/quant_kernels.h, whose matmul_quantized calls matmul_int8_activations below.
//
// Each token's activations are quantized per block (d = absmax / 127, q = round-to-nearest-even(
// x * 127 / absmax); the scalar table documents the arithmetic). Blocks are the weight's
// groups for int8 and 32 values for int4. int8 weights with longer groups (per channel above
// all) take the long-block path at the end of this file. Blocks of 32 (int4, and int8 in
// groups of 32 such as GGUF Q8_0) go as follows: each 32-block is an exact integer dot product
// in 256-bit vectors: AVX2 vpmaddubsw + vpmaddwd (u8 x s8; int8 weights use the sign trick |w|
// and sign(x, w), whose pair sums 2 * 128 * 127 cannot saturate int16), AVX-512 VNNI vpdpbusd.
// The integer sums of 4 rows are folded into one vector before the conversion to fp32 (see the
// tiles), which is scaled by d_b * scale_g and accumulated. int4 takes two blocks per 32-byte
// load (one mask and one shift split the nibbles; the activations are stored in the matching
// pair order). The int4 min term Σ_c x_c * min_g does not depend on the weight values: per
// token and group Σ_b∈g d_b Σ q_x is computed once at quantization, so a row adds only
// Σ_g min_g * that. Decode streams 4 rows at a time with one token per tile. Many tokens take
// panels: on AVX512_VNNI (V::kZmmBlockTiles) those of avx512.cpp, in zmm vectors; otherwise
// int8 (every group size) takes the lane panels of int8_lane_panels.h (rows in the lanes,
// vpmaddwd) and int4 sweeps panels of 16 rows (in L2) with tiles of 4 rows x
// V::kIntTileTokens tokens. Every row is computed by the same operations in every path:
// batch-invariant.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/activation_reuse.h"
#include "kernels/simd/simd_kernels.h"

namespace pagoda::x86 {

// The shared SIMD templates (Scratch, tiles, prefetch, ...) are used here unqualified.
using namespace simd;

// ---------------------------------------------------------------------------------------------
// W8A8 / W4A8: int8 activations, integer dot products per block of 32.

// One call's activations quantized per token. For int8 weights q is [num_tokens, cols] in
// natural order. For int4 weights blocks go in pairs (b, b + 1) to match how 32 bytes of
// packed int4 split into nibbles: each pair is 64 bytes, [b 0..15 | b+1 0..15] then
// [b 16..31 | b+1 16..31] (a zero block pads an odd count), and d_pairs holds
// [d_b x 4 | d_b+1 x 4] per pair. int4 only: group_sums [num_tokens, num_groups] =
// Σ_b∈g d_b Σ_i q_x[b, i], for the min term of weights with zero points; neg_bias
// [num_tokens, num_blocks] = -8 Σ_i q_x[b, i], for symmetric weights (see int4_dot_tile).
struct QuantizedActivations {
  const int8_t* q = nullptr;
  const float* d = nullptr;
  const float* d_pairs = nullptr;
  const float* group_sums = nullptr;
  const int32_t* neg_bias = nullptr;
  int64_t cols = 0, num_blocks = 0, num_groups = 0, num_pairs = 0, q_ld = 0;
};

// What a call's activations were quantized from. A later call on the same thread in the same
// ActivationReuseScope with an equal key reuses them (a template, as everything here, so
// each ISA file keeps its own copy).
template <class V>
struct ActivationKey {
  const float* x = nullptr;
  int64_t num_tokens = 0, cols = 0, group_size = 0;
  bool for_int4 = false;
  uint64_t scope = 0;
  bool operator==(const ActivationKey&) const = default;
  bool reusable(const ActivationKey& kept) const { return scope != 0 && *this == kept; }
};

template <class V>
inline float reduce_add_256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

template <class V>
inline float reduce_max_256(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

template <class V>
inline int32_t reduce_add_epi32_256(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// Quantizes x [num_tokens, cols] into per-thread scratch (grown rarely, never freed on the hot
// path). Exactly the scalar table's arithmetic: max is exact, 127 / absmax and x * inv are
// single IEEE operations, vcvtps2dq rounds to nearest even like nearbyint.
template <class V>
QuantizedActivations quantize_activations(const float* x, int64_t num_tokens, int64_t cols,
                                          int64_t group_size, bool for_int4) {
  static thread_local Scratch<V> scratch;
  static thread_local ActivationKey<V> kept_key;
  static thread_local QuantizedActivations kept;
  const ActivationKey<V> key{x, num_tokens, cols, group_size, for_int4, activation_reuse_scope()};
  if (key.reusable(kept_key)) return kept;
  QuantizedActivations qa;
  qa.cols = cols;
  qa.num_blocks = cols / kQuantBlock;
  qa.num_groups = cols / group_size;
  qa.num_pairs = (qa.num_blocks + 1) / 2;
  qa.q_ld = for_int4 ? qa.num_pairs * 2 * kQuantBlock : cols;
  const auto round64 = [](int64_t n) { return (n + 63) & ~int64_t{63}; };
  const int64_t q_bytes = round64(num_tokens * qa.q_ld);
  const int64_t d_bytes = round64(num_tokens * qa.num_blocks * 4);
  const int64_t pair_bytes = for_int4 ? round64(num_tokens * qa.num_pairs * 8 * 4) : 0;
  const int64_t sum_bytes = for_int4 ? round64(num_tokens * qa.num_groups * 4) : 0;
  const int64_t bias_bytes = for_int4 ? num_tokens * qa.num_blocks * 4 : 0;
  auto* base = static_cast<char*>(
      scratch.get(static_cast<size_t>(q_bytes + d_bytes + pair_bytes + sum_bytes + bias_bytes)));
  auto* q = reinterpret_cast<int8_t*>(base);
  auto* d = reinterpret_cast<float*>(base + q_bytes);
  auto* d_pairs = reinterpret_cast<float*>(base + q_bytes + d_bytes);
  auto* sums = reinterpret_cast<float*>(base + q_bytes + d_bytes + pair_bytes);
  auto* neg_bias = reinterpret_cast<int32_t*>(base + q_bytes + d_bytes + pair_bytes + sum_bytes);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  // vpackssdw / vpacksswb interleave the 128-bit lanes; this puts the 4-byte runs back in order.
  const __m256i unshuffle = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const int64_t blocks_per_group = group_size / kQuantBlock;
  for (int64_t t = 0; t < num_tokens; ++t) {
    __m256i previous = _mm256_setzero_si256();  // int4: the even block of the current pair
    for (int64_t b = 0; b < qa.num_blocks; ++b) {
      const float* src = x + t * cols + b * kQuantBlock;
      const __m256 v0 = _mm256_loadu_ps(src), v1 = _mm256_loadu_ps(src + 8);
      const __m256 v2 = _mm256_loadu_ps(src + 16), v3 = _mm256_loadu_ps(src + 24);
      const __m256 m =
          _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v0, abs_mask), _mm256_and_ps(v1, abs_mask)),
                        _mm256_max_ps(_mm256_and_ps(v2, abs_mask), _mm256_and_ps(v3, abs_mask)));
      const float absmax = reduce_max_256<V>(m);
      const float inv = absmax > 0.0f ? 127.0f / absmax : 0.0f;
      const float block_d = absmax / 127.0f;
      d[t * qa.num_blocks + b] = block_d;
      const __m256 iv = _mm256_set1_ps(inv);
      const __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v0, iv));
      const __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v1, iv));
      const __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v2, iv));
      const __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v3, iv));
      const __m256i block = _mm256_permutevar8x32_epi32(
          _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3)), unshuffle);
      if (!for_int4) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + t * qa.q_ld + b * kQuantBlock), block);
        continue;
      }
      const int64_t g = b / blocks_per_group;
      const int32_t block_sum = reduce_add_epi32_256<V>(
          _mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3)));
      neg_bias[t * qa.num_blocks + b] = -8 * block_sum;
      const float term = block_d * static_cast<float>(block_sum);
      float& sum = sums[t * qa.num_groups + g];
      sum = b % blocks_per_group == 0 ? term : sum + term;
      const bool odd = (b & 1) != 0, last = b + 1 == qa.num_blocks;
      if (!odd && !last) {
        previous = block;
        continue;
      }
      const __m256i even = odd ? previous : block, second = odd ? block : _mm256_setzero_si256();
      const float d_even = odd ? d[t * qa.num_blocks + b - 1] : block_d;
      const float d_second = odd ? block_d : 0.0f;
      int8_t* out = q + t * qa.q_ld + b / 2 * 2 * kQuantBlock;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out),
                          _mm256_permute2x128_si256(even, second, 0x20));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + kQuantBlock),
                          _mm256_permute2x128_si256(even, second, 0x31));
      _mm256_storeu_ps(d_pairs + (t * qa.num_pairs + b / 2) * 8,
                       _mm256_set_m128(_mm_set1_ps(d_second), _mm_set1_ps(d_even)));
    }
  }
  qa.q = q;
  qa.d = d;
  qa.d_pairs = for_int4 ? d_pairs : nullptr;
  qa.group_sums = for_int4 ? sums : nullptr;
  qa.neg_bias = for_int4 ? neg_bias : nullptr;
  kept_key = key;
  kept = qa;
  return qa;
}

// Σ_g min_g * group_sums_g: the min term of one (row, token) of int4 weights with zero points.
template <class V>
float min_term(const uint16_t* mins, const float* group_sums, int64_t num_groups) {
  __m256 acc = _mm256_setzero_ps();
  int64_t g = 0;
  for (; g + 8 <= num_groups; g += 8) {
    const __m256 m = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(mins + g)));
    acc = _mm256_fmadd_ps(m, _mm256_loadu_ps(group_sums + g), acc);
  }
  float sum = reduce_add_256<V>(acc);
  for (; g < num_groups; ++g) sum += V::half_to_float(mins[g]) * group_sums[g];
  return sum;
}

// Both tiles below fold the integer sums of 4 rows into one vector [r0 r1 r2 r3 | r0 r1 r2 r3]
// before converting to fp32, so the conversion, the multiply by d * scale and the FMA are
// paid once per 4 rows rather than per row: that float work, not the integer products, is
// what bounds a dot product with a scale per 32-block on AVX2. Rows past num_rows repeat the
// last row and are not stored, so a row is computed by the same lanes and operations whatever
// tile it falls in (batch and thread-split invariance). Each row's result is lane r + lane
// r + 4 of its accumulator. w_rows points at the first row's values, w_ld bytes apart.

// The scales of 4 rows for group g as [r0 r1 r2 r3].
template <class V>
inline __m128 scales_4_rows(const uint16_t* const scale_row[4], int64_t g) {
  return _mm_cvtph_ps(_mm_setr_epi16(
      static_cast<int16_t>(scale_row[0][g]), static_cast<int16_t>(scale_row[1][g]),
      static_cast<int16_t>(scale_row[2][g]), static_cast<int16_t>(scale_row[3][g]), 0, 0, 0, 0));
}

// The per-thread scratch that scales_of_4_rows (and avx512.cpp's zmm version) fill.
template <class V>
float* scales_of_4_rows_scratch(int64_t num_groups) {
  static thread_local Scratch<V> scratch;
  return static_cast<float*>(scratch.get(static_cast<size_t>(num_groups) * 4 * sizeof(float)));
}

// The scales of 4 rows for groups [g, num_groups), as [group][r0 r1 r2 r3] floats at out:
// eight groups cost four 128-bit loads, a 4 x 8 transpose and four conversions, where
// scales_4_rows per group costs four scalar loads and inserts (the bulk of a group-32 decode
// tile's loads). The same fp16 -> fp32 conversion, so the same values.
template <class V>
void scales_of_4_rows_from(const uint16_t* const scale_row[4], int64_t g, int64_t num_groups,
                           float* out) {
  for (; g + 8 <= num_groups; g += 8) {
    __m128i r[4];
    for (int i = 0; i < 4; ++i) {
      r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(scale_row[i] + g));
    }
    const __m128i r01_lo = _mm_unpacklo_epi16(r[0], r[1]), r01_hi = _mm_unpackhi_epi16(r[0], r[1]);
    const __m128i r23_lo = _mm_unpacklo_epi16(r[2], r[3]), r23_hi = _mm_unpackhi_epi16(r[2], r[3]);
    // Each holds two groups' [r0 r1 r2 r3] in group order.
    const __m128i pairs[4] = {
        _mm_unpacklo_epi32(r01_lo, r23_lo), _mm_unpackhi_epi32(r01_lo, r23_lo),
        _mm_unpacklo_epi32(r01_hi, r23_hi), _mm_unpackhi_epi32(r01_hi, r23_hi)};
    for (int i = 0; i < 4; ++i) _mm256_storeu_ps(out + (g + 2 * i) * 4, _mm256_cvtph_ps(pairs[i]));
  }
  for (; g < num_groups; ++g) _mm_storeu_ps(out + g * 4, scales_4_rows<V>(scale_row, g));
}

// Every group's scales of 4 rows, in per-thread scratch (valid until the next call).
template <class V>
const float* scales_of_4_rows(const uint16_t* const scale_row[4], int64_t num_groups) {
  float* out = scales_of_4_rows_scratch<V>(num_groups);
  scales_of_4_rows_from<V>(scale_row, 0, num_groups, out);
  return out;
}

template <class V, int kTokens>
void store_4_rows(const __m256 acc[kTokens], const QuantizedActivations& qa, int64_t token,
                  const WeightView& w, int64_t row, int64_t num_rows, float* y, int64_t ldy) {
  for (int t = 0; t < kTokens; ++t) {
    alignas(16) float rows4[4];
    _mm_store_ps(rows4,
                 _mm_add_ps(_mm256_castps256_ps128(acc[t]), _mm256_extractf128_ps(acc[t], 1)));
    for (int r = 0; r < num_rows; ++r) {
      float v = rows4[r];
      if (w.dtype == DType::kI4 && !w.symmetric_int4) {
        v += min_term<V>(w.mins + (row + r) * qa.num_groups,
                         qa.group_sums + (token + t) * qa.num_groups, qa.num_groups);
      }
      y[t * ldy + r] = v;
    }
  }
}

// The 4 rows of a block tile: rows past num_rows repeat the last row (computed, never stored).
struct TileRows {
  const uint8_t* values[4];
  const uint16_t* scales[4];
  const uint16_t* mins[4];  // int4 only
};

template <class V>
inline TileRows tile_rows(const uint8_t* w_rows, int64_t w_ld, const WeightView& w, int64_t row,
                          int64_t num_rows, int64_t num_groups) {
  TileRows rows{};
  for (int r = 0; r < 4; ++r) {
    const int64_t valid = r < num_rows ? r : num_rows - 1;
    rows.values[r] = w_rows + valid * w_ld;
    rows.scales[r] = w.scales + (row + valid) * num_groups;
    rows.mins[r] = w.mins != nullptr ? w.mins + (row + valid) * num_groups : nullptr;
  }
  return rows;
}

// int8 weights, 4 rows x kTokens tokens, one block at a time: 4 x 8 int32 lanes folded by
// three vphaddd into row r's dot over the low (high) 16 values of the block in lane r (r + 4),
// whose halves are added in int32, so that a block is finished as one exact sum, as the lane
// panels (int8_lane_panels.h) finish it: fma(float(Σ q_x q_w), d * scale, acc).
template <class V, int kTokens>
void int8_dot_tile(const QuantizedActivations& qa, int64_t token, const uint8_t* w_rows,
                   int64_t w_ld, const WeightView& w, int64_t row, int64_t num_rows, float* y,
                   int64_t ldy) {
  const int64_t num_groups = qa.num_groups, blocks_per_group = qa.num_blocks / num_groups;
  const TileRows rows = tile_rows<V>(w_rows, w_ld, w, row, num_rows, num_groups);
  const uint8_t* const* w_row = rows.values;
  const uint16_t* const* scale_row = rows.scales;
  // Decode passes each 4-row group once, so all its scales are gathered up front; tiles of many
  // tokens are called again per token tile, where converting per group measured faster.
  const float* scales = kTokens == 1 ? scales_of_4_rows<V>(scale_row, num_groups) : nullptr;
  __m128 acc[kTokens];
  for (int t = 0; t < kTokens; ++t) acc[t] = _mm_setzero_ps();
  for (int64_t g = 0; g < num_groups; ++g) {
    const __m128 scale =
        kTokens == 1 ? _mm_loadu_ps(scales + g * 4) : scales_4_rows<V>(scale_row, g);
    for (int64_t b = g * blocks_per_group; b < (g + 1) * blocks_per_group; ++b) {
      if constexpr (kTokens == 1) {  // decode: see prefetch_linear
        prefetch_stream<V>(w_rows, 4 * w_ld, b * 4 * kQuantBlock, 4 * kQuantBlock);
      }
      __m256i unsigned_w[4], sign_w[4];
      for (int r = 0; r < 4; ++r) {
        sign_w[r] =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w_row[r] + b * kQuantBlock));
        unsigned_w[r] = _mm256_sign_epi8(sign_w[r], sign_w[r]);  // |w|; -128 reads as 128
      }
      for (int t = 0; t < kTokens; ++t) {
        const __m256i xq = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(qa.q + (token + t) * qa.q_ld + b * kQuantBlock));
        __m256i p[4];
        for (int r = 0; r < 4; ++r) {
          p[r] = V::dot_u8s8(unsigned_w[r], _mm256_sign_epi8(xq, sign_w[r]));  // |w| * x sign(w)
        }
        const __m256i halves =
            _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
        const __m128i sums =
            _mm_add_epi32(_mm256_castsi256_si128(halves), _mm256_extracti128_si256(halves, 1));
        const __m128 d = _mm_set1_ps(qa.d[(token + t) * qa.num_blocks + b]);
        acc[t] = _mm_fmadd_ps(_mm_cvtepi32_ps(sums), _mm_mul_ps(d, scale), acc[t]);
      }
    }
  }
  for (int t = 0; t < kTokens; ++t) {
    alignas(16) float rows4[4];
    _mm_store_ps(rows4, acc[t]);
    for (int r = 0; r < num_rows; ++r) y[t * ldy + r] = rows4[r];
  }
}

// int4 weights, 4 rows x kTokens tokens, two blocks at a time: 32 packed bytes hold blocks b
// and b + 1, so one mask gives [b 0..15 | b+1 0..15] and a shift plus mask [b 16..31 |
// b+1 16..31], matching the pair layout of the activations. Lane r (r + 4) holds row r's dot
// over block b (b + 1). Without VNNI the vpmaddubsw int16 sums stay in int16 through the
// folds: 4 products <= 4 * 15 * 127, then two vphaddw give sums of 16 <= 30480 < 2^15.
// Symmetric weights (w = s (q - 8)) take the -8 inside the integer sum, -8 Σ q_x per block
// (qa.neg_bias), where zero points need the float min term: one add per block instead of a
// float term per group and row (in the AVX-512 decode tile, a chain of FMAs that took a fifth
// of its time).
template <class V, int kTokens>
void int4_dot_tile(const QuantizedActivations& qa, int64_t token, const uint8_t* w_rows,
                   int64_t w_ld, const WeightView& w, int64_t row, int64_t num_rows, float* y,
                   int64_t ldy) {
  const int64_t blocks_per_group = w.group_size / kQuantBlock;
  const __m256i low_nibbles = _mm256_set1_epi8(0x0f);
  const TileRows rows = tile_rows<V>(w_rows, w_ld, w, row, num_rows, qa.num_groups);
  const uint8_t* const* w_row = rows.values;
  const uint16_t* const* scale_row = rows.scales;
  __m256 acc[kTokens];
  for (int t = 0; t < kTokens; ++t) acc[t] = _mm256_setzero_ps();
  __m256 scale = _mm256_setzero_ps();
  int64_t scale_group = -1;  // group of the even block that `scale` was built for
  for (int64_t pair = 0; pair < qa.num_pairs; ++pair) {
    const int64_t b = 2 * pair;
    const bool full = b + 1 < qa.num_blocks;
    const int64_t g0 = b / blocks_per_group;
    if (blocks_per_group == 1 && full) {
      // Each block its own group: a row's scales for g0 and g0 + 1 are adjacent, so 4 32-bit
      // loads, one conversion and one permute give [g0 of r0..r3 | g0 + 1 of r0..r3].
      int32_t pairs[4];
      for (int r = 0; r < 4; ++r) __builtin_memcpy(&pairs[r], scale_row[r] + g0, 4);
      const __m256 f = _mm256_cvtph_ps(_mm_setr_epi32(pairs[0], pairs[1], pairs[2], pairs[3]));
      scale = _mm256_permutevar8x32_ps(f, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
    } else if (blocks_per_group == 1) {  // the last, unpaired block
      const __m128 s_even = scales_4_rows<V>(scale_row, g0);
      scale = _mm256_set_m128(s_even, s_even);
    } else if (g0 != scale_group || (full && (b + 1) / blocks_per_group != g0)) {
      const __m128 s_even = scales_4_rows<V>(scale_row, g0);
      const int64_t g1 = full ? (b + 1) / blocks_per_group : g0;
      scale = _mm256_set_m128(g1 == g0 ? s_even : scales_4_rows<V>(scale_row, g1), s_even);
      scale_group = g1 == g0 ? g0 : -1;
    }
    if constexpr (kTokens == 1) {  // decode: see prefetch_linear
      prefetch_stream<V>(w_rows, 4 * w_ld, pair * 4 * 2 * 16, 4 * 2 * 16);
    }
    __m256i lo[4], hi[4];
    for (int r = 0; r < 4; ++r) {
      const uint8_t* p = w_row[r] + b * 16;
      const __m256i packed =
          full ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))
               : _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
      lo[r] = _mm256_and_si256(packed, low_nibbles);
      hi[r] = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low_nibbles);
    }
    for (int t = 0; t < kTokens; ++t) {
      const int8_t* xp = qa.q + (token + t) * qa.q_ld + pair * 2 * kQuantBlock;
      const __m256i x_lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xp));
      const __m256i x_hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xp + kQuantBlock));
      __m256i sums;
      if constexpr (V::kVnni) {
        __m256i p[4];
        for (int r = 0; r < 4; ++r) p[r] = V::dot_u8s8_add(V::dot_u8s8(lo[r], x_lo), hi[r], x_hi);
        sums = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
      } else {
        __m256i p[4];
        for (int r = 0; r < 4; ++r) {
          p[r] = _mm256_add_epi16(_mm256_maddubs_epi16(lo[r], x_lo),
                                  _mm256_maddubs_epi16(hi[r], x_hi));
        }
        sums = _mm256_madd_epi16(
            _mm256_hadd_epi16(_mm256_hadd_epi16(p[0], p[1]), _mm256_hadd_epi16(p[2], p[3])),
            _mm256_set1_epi16(1));
      }
      if (w.symmetric_int4) {  // [bias_b x 4 | bias_b+1 x 4]; an unpaired block's pair adds 0
        const int32_t* bias = qa.neg_bias + (token + t) * qa.num_blocks + b;
        sums = _mm256_add_epi32(
            sums, _mm256_set_m128i(_mm_set1_epi32(full ? bias[1] : 0), _mm_set1_epi32(bias[0])));
      }
      const __m256 d = _mm256_loadu_ps(qa.d_pairs + ((token + t) * qa.num_pairs + pair) * 8);
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_mul_ps(d, scale), acc[t]);
    }
  }
  store_4_rows<V, kTokens>(acc, qa, token, w, row, num_rows, y, ldy);
}

// The block tile for kType on this ISA (the zmm tiles where V has them).
template <class V, DType kType, int kTokens>
void int_tile(const QuantizedActivations& qa, int64_t token, const uint8_t* w_rows, int64_t w_ld,
              const WeightView& w, int64_t row, int64_t num_rows, float* y, int64_t ldy) {
  if constexpr (kType == DType::kI8 && V::kZmmBlockTiles) {
    V::template int8_zmm_tile<kTokens>(qa, token, w_rows, w_ld, w, row, num_rows, y, ldy);
  } else if constexpr (kType == DType::kI8) {
    int8_dot_tile<V, kTokens>(qa, token, w_rows, w_ld, w, row, num_rows, y, ldy);
  } else if constexpr (V::kZmmBlockTiles) {
    V::template int4_zmm_tile<kTokens>(qa, token, w_rows, w_ld, w, row, num_rows, y, ldy);
  } else {
    int4_dot_tile<V, kTokens>(qa, token, w_rows, w_ld, w, row, num_rows, y, ldy);
  }
}

// Below this many tokens rows are streamed 4 at a time with one token per tile (the 4 rows
// stay in L1 while the tokens pass over them); from it on, panels of 16 rows (in L2) are
// repacked once per call and swept by register tiles of several tokens.
constexpr int64_t kIntManyTokens = 4;

template <class V, DType kType>
void matmul_int8_blocks(const float* x, int64_t num_tokens, const WeightView& w, int64_t row_begin,
                        int64_t row_end, float* y, int64_t ldy) {
  const QuantizedActivations qa =
      quantize_activations<V>(x, num_tokens, w.cols, w.group_size, kType == DType::kI4);
  if constexpr (V::kZmmBlockTiles) {
    if (num_tokens >= kIntManyTokens) {
      if constexpr (kType == DType::kI8) {
        V::int8_panels(qa, num_tokens, w, row_begin, row_end, y, ldy);
      } else {
        V::int4_panels(qa, num_tokens, w, row_begin, row_end, y, ldy);
      }
      return;
    }
  }
  const int64_t row_bytes = quant_row_bytes<kType>(w.cols);
  const auto* data = static_cast<const uint8_t*>(w.data);
  if (num_tokens < kIntManyTokens) {
    // A tile reads its rows' scales (and an asymmetric int4's mins) at its start, a second and
    // smaller stream beside the values that the tiles' own prefetch does not cover: prefetched
    // the same number of 4-row groups ahead.
    const int64_t scale_bytes = 4 * qa.num_groups * static_cast<int64_t>(sizeof(uint16_t));
    const bool stream_mins = kType == DType::kI4 && !w.symmetric_int4;
    for (int64_t r = row_begin; r < row_end; r += 4) {
      const int64_t rows = min_i64<V>(4, row_end - r);
      prefetch_linear<V>(w.scales + r * qa.num_groups, scale_bytes, 0, scale_bytes);
      if (stream_mins) prefetch_linear<V>(w.mins + r * qa.num_groups, scale_bytes, 0, scale_bytes);
      for (int64_t t = 0; t < num_tokens; ++t) {
        int_tile<V, kType, 1>(qa, t, data + r * row_bytes, row_bytes, w, r, rows, y + t * ldy + r,
                              ldy);
      }
    }
    return;
  }
  // int4, and int8 below kLanePanelTokens (from there on it takes the lane panels, see
  // matmul_int8_activations): panels of kPanelRows rows (in L2) swept by tiles of 4 rows x
  // V::kIntTileTokens tokens.
  constexpr int kT = V::kIntTileTokens;
  for (int64_t r0 = row_begin; r0 < row_end; r0 += kPanelRows) {
    const int64_t panel_rows = min_i64<V>(kPanelRows, row_end - r0);
    for (int64_t t0 = 0; t0 < num_tokens; t0 += kT) {
      const int64_t tile_tokens = min_i64<V>(kT, num_tokens - t0);
      for (int64_t r = r0; r < r0 + panel_rows; r += 4) {
        with_tile_shape<V, 1, kT>(1, tile_tokens, [&]<int R, int T>() {
          int_tile<V, kType, T>(qa, t0, data + r * row_bytes, row_bytes, w, r,
                                min_i64<V>(4, r0 + panel_rows - r), y + t0 * ldy + r, ldy);
        });
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// W8A8 with long blocks: int8 weights whose group is longer than 32 values (one scale per
// output channel above all, vLLM's W8A8). The activations get one scale per token and group
// (per token for per-channel weights), so a whole group is one exact integer dot product and
// the float work (a conversion, two multiplies and an add) is paid once per group instead of
// once per 32 values. The products use vpmaddwd on int16: the activations are stored widened
// once per call, the weights are widened as loaded (vpmovsxbw); a vpmaddwd + vpaddd per
// V::kWideLanes values is as many multiply-port operations per product as vpmaddubsw +
// vpmaddwd with the sign trick, and needs neither the sign trick nor the 4-row folds. VNNI
// fuses the add (vpdpwssd). Integer sums are exact and each (row, token) adds its groups'
// float terms in group order, so every tile shape gives the same bits (batch invariance).

// One call's activations for the long-block path: q [num_tokens, cols] int16, d [num_tokens,
// num_groups].
struct WideActivations {
  const int16_t* q = nullptr;
  const float* d = nullptr;
  int64_t cols = 0, num_groups = 0;
};

// Exactly the scalar table's arithmetic per block of group_size values (see
// quantize_activations).
template <class V>
WideActivations quantize_activations_wide(const float* x, int64_t num_tokens, int64_t cols,
                                          int64_t group_size) {
  static thread_local Scratch<V> scratch;
  static thread_local ActivationKey<V> kept_key;
  static thread_local WideActivations kept;
  const ActivationKey<V> key{x, num_tokens, cols, group_size, false, activation_reuse_scope()};
  if (key.reusable(kept_key)) return kept;
  WideActivations qa;
  qa.cols = cols;
  qa.num_groups = cols / group_size;
  const int64_t q_bytes = (num_tokens * cols * 2 + 63) & ~int64_t{63};
  auto* base = static_cast<char*>(
      scratch.get(static_cast<size_t>(q_bytes + num_tokens * qa.num_groups * 4)));
  auto* q = reinterpret_cast<int16_t*>(base);
  auto* d = reinterpret_cast<float*>(base + q_bytes);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t g = 0; g < qa.num_groups; ++g) {
      const float* src = x + t * cols + g * group_size;
      __m256 m = _mm256_setzero_ps();
      for (int64_t i = 0; i < group_size; i += 8) {
        m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(src + i), abs_mask));
      }
      const float absmax = reduce_max_256<V>(m);
      const __m256 inv = _mm256_set1_ps(absmax > 0.0f ? 127.0f / absmax : 0.0f);
      d[t * qa.num_groups + g] = absmax / 127.0f;
      int16_t* out = q + t * cols + g * group_size;
      for (int64_t i = 0; i < group_size; i += 16) {
        const __m256i lo = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(src + i), inv));
        const __m256i hi = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(src + i + 8), inv));
        // vpackssdw interleaves the 128-bit lanes; the permute puts the 4 runs back in order.
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                            _mm256_permute4x64_epi64(_mm256_packs_epi32(lo, hi), 0xd8));
      }
    }
  }
  qa.q = q;
  qa.d = d;
  kept_key = key;
  kept = qa;
  return qa;
}

// kRows rows (w_rows, cols bytes apart) x kTokens tokens; int32 accumulators per group.
template <class V, int kRows, int kTokens>
void int8_wide_tile(const WideActivations& qa, int64_t token, const int8_t* w_rows,
                    const WeightView& w, int64_t row, float* y, int64_t ldy) {
  using I = typename V::I;
  constexpr int kL = V::kWideLanes;
  const int64_t cols = qa.cols, num_groups = qa.num_groups, gs = w.group_size;
  float out[kRows][kTokens] = {};
  for (int64_t g = 0; g < num_groups; ++g) {
    I acc[kRows][kTokens];
    for (int r = 0; r < kRows; ++r) {
      for (int t = 0; t < kTokens; ++t) acc[r][t] = V::zero_i();
    }
    for (int64_t c = g * gs; c < (g + 1) * gs; c += kL) {
      if constexpr (kTokens == 1) {  // decode: see prefetch_linear
        prefetch_stream<V>(w_rows, kRows * cols, c * kRows, kRows * kL);
      }
      I wv[kRows];
      for (int r = 0; r < kRows; ++r) wv[r] = V::load_i8_as_i16(w_rows + r * cols + c);
      for (int t = 0; t < kTokens; ++t) {
        const I xv = V::load_i16(qa.q + (token + t) * cols + c);
        for (int r = 0; r < kRows; ++r) acc[r][t] = V::madd_add(acc[r][t], wv[r], xv);
      }
    }
    // fma(dot, d * scale, out): the finish of the AVX512_VNNI panels too (batch invariance).
    for (int r = 0; r < kRows; ++r) {
      const float scale = V::half_to_float(w.scales[(row + r) * num_groups + g]);
      for (int t = 0; t < kTokens; ++t) {
        const float dot = static_cast<float>(V::reduce_add_i32(acc[r][t]));
        out[r][t] = __builtin_fmaf(dot, qa.d[(token + t) * num_groups + g] * scale, out[r][t]);
      }
    }
  }
  for (int t = 0; t < kTokens; ++t) {
    for (int r = 0; r < kRows; ++r) y[t * ldy + r] = out[r][t];
  }
}

template <class V>
void matmul_int8_wide(const float* x, int64_t num_tokens, const WeightView& w, int64_t row_begin,
                      int64_t row_end, float* y, int64_t ldy) {
  const WideActivations qa = quantize_activations_wide<V>(x, num_tokens, w.cols, w.group_size);
  if constexpr (V::kZmmBlockTiles) {
    if (num_tokens >= kIntManyTokens) {
      V::int8_wide_panels(qa, num_tokens, w, row_begin, row_end, y, ldy);
      return;
    }
  }
  // Fewer than kLanePanelTokens tokens without VNNI (more go to the lane panels, see
  // matmul_int8_activations): 4 rows streamed, the tokens pass over them.
  const int64_t cols = w.cols;
  const auto* data = static_cast<const int8_t*>(w.data);
  for (int64_t r = row_begin; r < row_end; r += 4) {
    const int64_t rows = min_i64<V>(4, row_end - r);
    for (int64_t t = 0; t < num_tokens; ++t) {
      with_tile_shape<V, 4, 1>(rows, 1, [&]<int R, int T>() {
        int8_wide_tile<V, R, T>(qa, t, data + r * cols, w, r, y + t * ldy + r, ldy);
      });
    }
  }
}

}  // namespace pagoda::x86

#include "kernels/x86/int8_lane_panels.h"

namespace pagoda::simd {

// The entry point declared in simd/quant_kernels.h.
template <class V>
void matmul_int8_activations(const float* x, int64_t num_tokens, const WeightView& w,
                             int64_t row_begin, int64_t row_end, float* y, int64_t ldy) {
  if constexpr (!V::kZmmBlockTiles) {
    if (w.lane_panels != nullptr ||
        (w.dtype == DType::kI8 && num_tokens >= x86::kLanePanelTokens)) {
      x86::matmul_lane_panels<V>(x, num_tokens, w, row_begin, row_end, y, ldy);
      return;
    }
  }
  if (w.dtype == DType::kI8 && w.group_size != kQuantBlock) {
    x86::matmul_int8_wide<V>(x, num_tokens, w, row_begin, row_end, y, ldy);
  } else if (w.dtype == DType::kI8) {
    x86::matmul_int8_blocks<V, DType::kI8>(x, num_tokens, w, row_begin, row_end, y, ldy);
  } else {
    x86::matmul_int8_blocks<V, DType::kI4>(x, num_tokens, w, row_begin, row_end, y, ldy);
  }
}

}  // namespace pagoda::simd
