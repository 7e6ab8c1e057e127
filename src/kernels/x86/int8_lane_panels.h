// W8A8 / W4A8 for many tokens without AVX512_VNNI (the avx2 table, and avx512 without VNNI):
// panels with the rows in the lanes. Included by int8_kernels.h after its quantizers; the
// templates follow its ODR rules (everything a template on the vector traits V).
//
// Why: the 4-row tiles of int8_kernels.h hold one row per vector and fold 4 rows' integer sums
// with vphaddd before the float work of a block; the folds, the sign trick and the block's
// float finish cost about as much as the products (Q8_0 prefill at ~45% of the vpmaddubsw +
// vpmaddwd peak on Zen 4). Here each 16-row panel is repacked once per call into int16 pairs
// [pair p][row r] = (w[r][2p], w[r][2p + 1]), so one 32-bit broadcast of a token's activation
// pair and one vpmaddwd give 16 multiply-adds for 8 rows, each in its own int32 lane: no fold,
// no sign trick (both operands are signed int16), as many multiply-port operations per product
// as vpmaddubsw + vpmaddwd. The register tile is 2 row vectors (the panel's 16 rows) x 6
// tokens: 12 int32 accumulators, 2 weight vectors, 1 broadcast, so a step is 8 loads for 12
// vpmaddwd + 12 vpaddd. A segment (an activation block: an int8 group, or 32 values for int4)
// is finished with one conversion, one multiply by d * scale and one FMA per 8 rows and token
// into fp32 accumulators parked in L1 between segments.
//
// The arithmetic is the decode tiles' (batch invariance): per segment fma(float(Σ q_x q_w),
// d * scale, acc) in segment order. int8 with groups of 32 accumulates as int8_dot_tile does;
// int4 keeps even and odd blocks in separate accumulators added at the end as int4_dot_tile
// does (its lanes r and r + 4), symmetric int4 keeps the -8 inside the integer sum (stored in
// the panel as q - 8: the same integer as Σ q q_x - 8 Σ q_x), and zero points add min_term
// last. Activations are quantized per block of segment length into int16 (the same values as
// quantize_activations: one quantizer's arithmetic).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace pagoda::x86 {

// Taken from kIntManyTokens tokens on (int8_kernels.h) when V has no zmm tiles.
constexpr int kLanePanelTileTokens = 6;
constexpr int64_t kLanePanelRows = 16;

// acc + vpmaddwd(w, x) in assembly: written with intrinsics, GCC gave each product its own
// register and, short of registers with 12 accumulators, kept half of them on the stack (a
// load and a store per vpaddd); here one scratch register serves every product.
inline __m256i madd_add(__m256i acc, __m256i w, __m256i x) {
  __m256i product;
  __asm__("vpmaddwd %[x], %[w], %[p]\n\tvpaddd %[p], %[acc], %[acc]"
          : [acc] "+x"(acc), [p] "=&x"(product)
          : [w] "x"(w), [x] "x"(x));
  return acc;
}

// Lanes of 8 rows x 8 int32 transposed: in[i] holds row i's pairs p0..p7, out[j] pair j of rows
// 0..7, stored at out + j * out_stride.
inline void transpose_8x8_store(const __m256i in[8], int32_t* out, int64_t out_stride) {
  __m256i t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_epi32(in[i], in[i + 1]);
    t[i + 1] = _mm256_unpackhi_epi32(in[i], in[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {  // u[i + k]: pair k | pair k + 4 of 4 rows
    u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int k = 0; k < 4; ++k) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k * out_stride),
                        _mm256_permute2x128_si256(u[k], u[k + 4], 0x20));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (k + 4) * out_stride),
                        _mm256_permute2x128_si256(u[k], u[k + 4], 0x31));
  }
}

// Rows [row, row + num_rows) (num_rows <= 16) of w as a lane panel [cols / 2][16] int32 at
// out, rows past num_rows zero (computed, never stored); scales [num_groups][16] fp32.
template <class V, DType kType>
void repack_lane_panel(const WeightView& w, int64_t row, int64_t num_rows, int32_t* out,
                       float* scales) {
  const int64_t cols = w.cols, num_groups = cols / w.group_size;
  const int64_t row_bytes = quant_row_bytes<kType>(cols);
  const auto* data = static_cast<const uint8_t*>(w.data) + row * row_bytes;
  for (int64_t half = 0; half < 2; ++half) {
    const uint8_t* rows[8];
    bool valid[8];
    for (int i = 0; i < 8; ++i) {
      const int64_t r = half * 8 + i;
      valid[i] = r < num_rows;
      rows[i] = data + (valid[i] ? r : 0) * row_bytes;
    }
    int32_t* dst = out + half * 8;
    __m256i v[8];
    if constexpr (kType == DType::kI8) {
      for (int64_t c = 0; c < cols; c += 16) {  // 8 pairs per row
        for (int i = 0; i < 8; ++i) {
          v[i] = valid[i] ? _mm256_cvtepi8_epi16(
                                _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[i] + c)))
                          : _mm256_setzero_si256();
        }
        transpose_8x8_store(v, dst + c / 2 * kLanePanelRows, kLanePanelRows);
      }
    } else {
      // 16 bytes per 32-block: byte j = value j | value j + 16 << 4.
      const __m128i low_nibbles = _mm_set1_epi8(0x0f);
      const __m256i bias = _mm256_set1_epi16(w.symmetric_int4 ? 8 : 0);
      __m256i hi[8];
      for (int64_t b = 0; b < cols / kQuantBlock; ++b) {
        for (int i = 0; i < 8; ++i) {
          const __m128i packed =
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[i] + b * 16));
          const __m256i lo16 = _mm256_cvtepu8_epi16(_mm_and_si128(packed, low_nibbles));
          const __m256i hi16 =
              _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), low_nibbles));
          v[i] = valid[i] ? _mm256_sub_epi16(lo16, bias) : _mm256_setzero_si256();
          hi[i] = valid[i] ? _mm256_sub_epi16(hi16, bias) : _mm256_setzero_si256();
        }
        transpose_8x8_store(v, dst + b * 16 * kLanePanelRows, kLanePanelRows);
        transpose_8x8_store(hi, dst + (b * 16 + 8) * kLanePanelRows, kLanePanelRows);
      }
    }
  }
  for (int64_t g = 0; g < num_groups; ++g) {
    for (int64_t r = 0; r < kLanePanelRows; ++r) {
      scales[g * kLanePanelRows + r] =
          r < num_rows ? V::half_to_float(w.scales[(row + r) * num_groups + g]) : 0.0f;
    }
  }
}

// 16 rows x kTokens tokens over every segment of the panel; park [kParities][kTokens][16] fp32
// accumulators (zeroed by the caller), int8: one parity, int4: even and odd blocks.
template <class V, int kTokens, int kParities>
void lane_panel_tile(const int32_t* panel, const float* scales, const WideActivations& qa,
                     int64_t token, int64_t segment_pairs, int64_t segments_per_group,
                     float* park) {
  const int64_t cols = qa.cols, num_segments = qa.num_groups;
  const int16_t* xq = qa.q + token * cols;
  int64_t group_segment = 0;  // s - the first segment of its group (no division per segment)
  const float* sc = scales;
  for (int64_t s = 0; s < num_segments; ++s) {
    if (group_segment == segments_per_group) {
      group_segment = 0;
      sc += kLanePanelRows;
    }
    ++group_segment;
    __m256i acc[2][kTokens];
    for (int t = 0; t < kTokens; ++t) acc[0][t] = acc[1][t] = _mm256_setzero_si256();
    const int64_t p_end = (s + 1) * segment_pairs;
    for (int64_t p = s * segment_pairs; p < p_end; ++p) {
      const __m256i w0 =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + p * kLanePanelRows));
      const __m256i w1 =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + p * kLanePanelRows + 8));
      for (int t = 0; t < kTokens; ++t) {
        int32_t pair;
        __builtin_memcpy(&pair, xq + t * cols + 2 * p, 4);
        const __m256i x = _mm256_set1_epi32(pair);
        acc[0][t] = madd_add(acc[0][t], w0, x);
        acc[1][t] = madd_add(acc[1][t], w1, x);
      }
    }
    const __m256 sc0 = _mm256_loadu_ps(sc), sc1 = _mm256_loadu_ps(sc + 8);
    float* f = park + (kParities == 2 ? (s & 1) : 0) * kTokens * kLanePanelRows;
    for (int t = 0; t < kTokens; ++t) {
      const __m256 d = _mm256_set1_ps(qa.d[(token + t) * num_segments + s]);
      float* ft = f + t * kLanePanelRows;
      _mm256_storeu_ps(ft, _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[0][t]), _mm256_mul_ps(d, sc0),
                                           _mm256_loadu_ps(ft)));
      _mm256_storeu_ps(ft + 8, _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[1][t]), _mm256_mul_ps(d, sc1),
                                               _mm256_loadu_ps(ft + 8)));
    }
  }
}

// Every token of the call against rows [row_begin, row_end), a panel of 16 rows at a time.
template <class V, DType kType>
void matmul_lane_panels(const float* x, int64_t num_tokens, const WeightView& w, int64_t row_begin,
                        int64_t row_end, float* y, int64_t ldy) {
  constexpr bool kInt4 = kType == DType::kI4;
  constexpr int kParities = kInt4 ? 2 : 1;
  constexpr int kT = kLanePanelTileTokens;
  const int64_t cols = w.cols, num_groups = cols / w.group_size;
  const int64_t segment = kInt4 ? kQuantBlock : w.group_size;
  const WideActivations qa = quantize_activations_wide<V>(x, num_tokens, cols, segment);
  const bool min_terms = kInt4 && !w.symmetric_int4;
  // The zero points' Σ_b∈g d_b Σ q_x, summed as the decode tiles' quantizer does.
  const float* group_sums =
      min_terms ? quantize_activations<V>(x, num_tokens, cols, w.group_size, true).group_sums
                : nullptr;
  static thread_local Scratch<V> scratch;
  const int64_t panel_ints = cols / 2 * kLanePanelRows;
  const int64_t scale_floats = num_groups * kLanePanelRows;
  const int64_t park_floats = kParities * kT * kLanePanelRows;
  auto* panel = static_cast<int32_t*>(
      scratch.get(static_cast<size_t>(panel_ints + scale_floats + park_floats) * 4));
  auto* scales = reinterpret_cast<float*>(panel + panel_ints);
  float* park = scales + scale_floats;
  const int64_t segments_per_group = w.group_size / segment;
  for (int64_t r0 = row_begin; r0 < row_end; r0 += kLanePanelRows) {
    const int64_t panel_rows = min_i64<V>(kLanePanelRows, row_end - r0);
    repack_lane_panel<V, kType>(w, r0, panel_rows, panel, scales);
    for (int64_t t0 = 0; t0 < num_tokens; t0 += kT) {
      const int64_t tokens = min_i64<V>(kT, num_tokens - t0);
      for (int64_t i = 0; i < park_floats; ++i) park[i] = 0.0f;
      with_tile_shape<V, 1, kT>(1, tokens, [&]<int R, int T>() {
        lane_panel_tile<V, T, kParities>(panel, scales, qa, t0, segment / 2, segments_per_group,
                                         park);
      });
      for (int64_t t = 0; t < tokens; ++t) {
        const float* even = park + t * kLanePanelRows;
        const float* odd = even + tokens * kLanePanelRows;  // the tile's parity stride
        for (int64_t r = 0; r < panel_rows; ++r) {
          float v = even[r];
          if constexpr (kInt4) v += odd[r];
          if (min_terms) {
            v += min_term<V>(w.mins + (r0 + r) * num_groups, group_sums + (t0 + t) * num_groups,
                             num_groups);
          }
          y[(t0 + t) * ldy + r0 + r] = v;
        }
      }
    }
  }
}

}  // namespace pagoda::x86
