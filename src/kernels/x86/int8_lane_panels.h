// W8A8 (int8 weights, every group size) for many tokens without AVX512_VNNI (the avx2 table,
// and avx512 without VNNI): panels with the rows in the lanes. Included by int8_kernels.h
// after its quantizers; the templates follow its ODR rules (each a template on the traits V).
//
// Why: the 4-row tiles of int8_kernels.h hold one row per vector and fold 4 rows' integer sums
// with vphaddd before the float work of each 32-block; the folds, the sign trick and the
// block's float finish cost about as much as the products (Q8_0 prefill at 44-46% of the
// vpmaddubsw + vpmaddwd peak on Zen 4 with the avx2 table). Here each 16-row panel is repacked
// once per call into int16 pairs [pair p][row r] = (w[r][2p], w[r][2p + 1]), so one 32-bit
// broadcast of a token's activation pair and one vpmaddwd give 16 multiply-adds for 8 rows,
// each in its own int32 lane: no fold, no sign trick (both operands are signed int16), as many
// multiply-port operations per product as vpmaddubsw + vpmaddwd. The register tile is the
// panel's 2 row vectors x 6 tokens: 12 int32 sums, 2 weight vectors, 1 broadcast and 1 product
// register, so a step is 8 loads for 12 vpmaddwd + 12 vpaddd. A group is finished with one
// conversion, one multiply by d * scale and one FMA per 8 rows and token, into fp32
// accumulators parked in L1 between groups. Activations are quantized per token and group
// into int16 once per call (quantize_activations_wide; groups of 32 give the values
// quantize_activations gives the decode tile).
//
// The arithmetic is the decode tiles' (batch invariance): per group fma(float(Σ q_x q_w),
// d * scale, acc) in group order, as int8_wide_tile and int8_dot_tile finish a group.
//
// Weights the loader packed (WeightView::lane_panels, kernels/lane_panels.h: the same order in
// int8, widened by one vpmovsxbw per 8 rows and pair as the tile loads them) take these tiles
// for every token count, decode included: no repack per call, and decode streams the panels
// instead of the rows, so the panels replace the row-major weights rather than doubling them.
// MoE experts with a handful of tokens and batched decode then run the panel tiles too.
//
// int4 stays on the 4-row tiles: the same panels with nibbles widened to int16 measured ~10%
// slower there (vpmaddubsw on unsigned nibbles keeps int16 sums over 8 products, twice the
// products per instruction of vpmaddwd, which pays for the folds; and a block's float finish
// per 32 values weighs more than an int8 group's).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/lane_panels.h"

namespace pagoda::x86 {

// The panels these tiles read (kernels/lane_panels.h): 16 rows x 2 bytes.
inline constexpr LanePanelLayout kLanePanelLayout{16, 2};
inline constexpr int64_t kLanePanelRows = kLanePanelLayout.rows;

// int8 takes the lane panels from this many tokens on when V has no zmm tiles: the repack
// costs about as much as 3-4 tokens' products. On Zen 4 with the avx2 table (1 thread, GOP/s
// per CPU-second, the old tiles / lane panels alternated): 8 tokens 72-93 / 61-77 per channel,
// 12 tokens 76-93 / 84-104, 32 tokens 89-101 / 115-146.
constexpr int64_t kLanePanelTokens = 10;
constexpr int kLanePanelTileTokens = 6;

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

// Rows [row, row + num_rows) (num_rows <= 16) of int8 weights w as a lane panel
// [cols / 2][16] int32 at out, rows past num_rows zero (computed, never stored); scales
// [num_groups][16] fp32.
template <class V>
void repack_lane_panel(const WeightView& w, int64_t row, int64_t num_rows, int32_t* out,
                       float* scales) {
  const int64_t cols = w.cols, num_groups = cols / w.group_size;
  const auto* data = static_cast<const int8_t*>(w.data) + row * cols;
  for (int64_t half = 0; half < 2; ++half) {
    const int8_t* rows[8];
    bool valid[8];
    for (int i = 0; i < 8; ++i) {
      const int64_t r = half * 8 + i;
      valid[i] = r < num_rows;
      rows[i] = data + (valid[i] ? r : 0) * cols;
    }
    __m256i v[8];
    for (int64_t c = 0; c < cols; c += 16) {  // 8 pairs of each row
      for (int i = 0; i < 8; ++i) {
        v[i] = valid[i] ? _mm256_cvtepi8_epi16(
                              _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[i] + c)))
                        : _mm256_setzero_si256();
      }
      transpose_8x8_store(v, out + c / 2 * kLanePanelRows + half * 8, kLanePanelRows);
    }
  }
  for (int64_t g = 0; g < num_groups; ++g) {
    for (int64_t r = 0; r < kLanePanelRows; ++r) {
      scales[g * kLanePanelRows + r] =
          r < num_rows ? V::half_to_float(w.scales[(row + r) * num_groups + g]) : 0.0f;
    }
  }
}

// Where a tile reads its panel from. WidePanel: repacked by this call (values widened to int16
// pairs, scales to fp32). PackedPanel: packed at load (kernels/lane_panels.h: int8 pairs, fp16
// scales), widened as loaded, one vpmovsxbw per 8 rows and pair. Both give the tile the same
// int16 pairs and fp32 scales, so the same bits.
struct WidePanel {
  const int32_t* pairs;  // [cols / 2][16]
  const float* scales;   // [num_groups][16]
};
struct PackedPanel {
  const int8_t* pairs;     // [cols / 2][16][2]
  const uint16_t* scales;  // [num_groups][16] fp16, not necessarily 2-byte aligned
};

template <class V>
inline void load_pair_rows(const WidePanel& panel, int64_t p, __m256i& w0, __m256i& w1) {
  w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel.pairs + p * kLanePanelRows));
  w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel.pairs + p * kLanePanelRows + 8));
}
template <class V>
inline void load_pair_rows(const PackedPanel& panel, int64_t p, __m256i& w0, __m256i& w1) {
  const int8_t* pair = panel.pairs + p * kLanePanelRows * 2;
  w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pair)));
  w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pair + 16)));
}
template <class V>
inline void load_scales(const WidePanel& panel, int64_t g, __m256& s0, __m256& s1) {
  s0 = _mm256_loadu_ps(panel.scales + g * kLanePanelRows);
  s1 = _mm256_loadu_ps(panel.scales + g * kLanePanelRows + 8);
}
template <class V>
inline void load_scales(const PackedPanel& panel, int64_t g, __m256& s0, __m256& s1) {
  const uint16_t* sc = panel.scales + g * kLanePanelRows;
  s0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc)));
  s1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + 8)));
}

// The weights a call reads after the current panel: their lines are requested while this
// panel's products run. values: 16 * cols bytes (the next packed panel's pairs, or the next 16
// row-major rows that the call repacks next); scales: 32 bytes per group (the packed panel's
// fp16 [group][16], or the next rows' fp16 [16][num_groups], which is as long). values null:
// nothing to prefetch.
struct NextWeights {
  const int8_t* values = nullptr;
  const char* scales = nullptr;
};

// 16 rows x kTokens tokens over every group of the panel, into acc [kTokens][16] fp32
// (zeroed by the caller; parked in L1 between groups, the registers hold the int32 sums).
// `next`: requested a line per two pair steps (values) and per group (scales).
//
// Why: a MoE expert's panels are read from memory once per layer for a handful of tokens
// (V2-Lite at 128 tokens: ~12 per expert, at 32: ~3), and the hardware prefetchers, which stop
// at page boundaries, left the first tile waiting on each panel: with the next panel
// requested one panel ahead, the MoE layer of bench_quant_kernels --moe went from 56-59% to
// 67-77% of the int8 peak per CPU-second at 128 tokens and from 46% to 55-61% at 32 (Q8_0
// panels 39-50% to 56-62% and 25-33% to 46-47%; avx2 table, 2 threads, shared machine).
// Row-major int8 (repacked per call: GGUF Q8_0 on the CPU device) gets the next rows the same
// way, so a repack reads from cache: 128 tokens 43-50% -> 46-60% (Q8_0 34-43% -> 48-51%).
template <class V, int kTokens, class Panel>
void lane_panel_tile(const Panel& panel, const WideActivations& qa, int64_t token,
                     int64_t group_pairs, const NextWeights& next, float* acc) {
  const int64_t cols = qa.cols, num_groups = qa.num_groups;
  const int16_t* xq = qa.q + token * cols;
  for (int64_t g = 0; g < num_groups; ++g) {
    __m256i sums[2][kTokens];
    for (int t = 0; t < kTokens; ++t) sums[0][t] = sums[1][t] = _mm256_setzero_si256();
    for (int64_t p = g * group_pairs; p < (g + 1) * group_pairs; ++p) {
      __m256i w0, w1;
      load_pair_rows<V>(panel, p, w0, w1);
      if (next.values != nullptr && (p & 1) == 0) {
        _mm_prefetch(reinterpret_cast<const char*>(next.values + p * 2 * kLanePanelRows),
                     _MM_HINT_T0);
      }
      for (int t = 0; t < kTokens; ++t) {
        int32_t pair;
        __builtin_memcpy(&pair, xq + t * cols + 2 * p, 4);
        const __m256i x = _mm256_set1_epi32(pair);
        sums[0][t] = madd_add(sums[0][t], w0, x);
        sums[1][t] = madd_add(sums[1][t], w1, x);
      }
    }
    if (next.values != nullptr) _mm_prefetch(next.scales + g * kLanePanelRows * 2, _MM_HINT_T0);
    __m256 sc0, sc1;
    load_scales<V>(panel, g, sc0, sc1);
    for (int t = 0; t < kTokens; ++t) {
      const __m256 d = _mm256_set1_ps(qa.d[(token + t) * num_groups + g]);
      float* at = acc + t * kLanePanelRows;
      _mm256_storeu_ps(at, _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums[0][t]), _mm256_mul_ps(d, sc0),
                                           _mm256_loadu_ps(at)));
      _mm256_storeu_ps(at + 8, _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums[1][t]),
                                               _mm256_mul_ps(d, sc1), _mm256_loadu_ps(at + 8)));
    }
  }
}

// Every token of the call against one panel; rows [first, first + count) of it are stored,
// row r of the panel at y[t * ldy + r - first].
template <class V, class Panel>
void lane_panel_tokens(const Panel& panel, const WideActivations& qa, int64_t num_tokens,
                       int64_t group_pairs, int64_t first, int64_t count, const NextWeights& next,
                       float* acc, float* y, int64_t ldy) {
  constexpr int kT = kLanePanelTileTokens;
  // Only the first tile prefetches: the panel is in cache for the others.
  // Tiles of near-equal size (8 tokens: 4 + 4, not 6 + 2): a narrow tile loads the weights
  // for few products.
  const int64_t num_tiles = (num_tokens + kT - 1) / kT;
  for (int64_t tile = 0, t0 = 0, tokens = 0; tile < num_tiles; ++tile, t0 += tokens) {
    tokens = (num_tokens - t0) / (num_tiles - tile);  // <= kT: the rest fit in the tiles left
    for (int64_t i = 0; i < kT * kLanePanelRows; ++i) acc[i] = 0.0f;
    with_tile_shape<V, 1, kT>(1, tokens, [&]<int R, int T>() {
      lane_panel_tile<V, T>(panel, qa, t0, group_pairs, tile == 0 ? next : NextWeights{}, acc);
    });
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t r = 0; r < count; ++r) {
        y[(t0 + t) * ldy + r] = acc[t * kLanePanelRows + first + r];
      }
    }
  }
}

// Every token of the call against int8 rows [row_begin, row_end), a panel of 16 rows at a time:
// the panels packed at load where the view has them, else each repacked here.
template <class V>
void matmul_lane_panels(const float* x, int64_t num_tokens, const WeightView& w, int64_t row_begin,
                        int64_t row_end, float* y, int64_t ldy) {
  const int64_t cols = w.cols, num_groups = cols / w.group_size, group_pairs = w.group_size / 2;
  const WideActivations qa = quantize_activations_wide<V>(x, num_tokens, cols, w.group_size);
  static thread_local Scratch<V> scratch;
  const int64_t acc_floats = kLanePanelTileTokens * kLanePanelRows;
  if (w.lane_panels != nullptr) {
    float* acc = static_cast<float*>(scratch.get(static_cast<size_t>(acc_floats) * 4));
    const int64_t panel_bytes = lane_panel_bytes(w, kLanePanelLayout);
    // A range that does not start on a panel (tests; ops splits rows at multiples of 16)
    // computes the whole panel and stores its part: every row takes the same operations.
    for (int64_t r0 = row_begin; r0 < row_end;) {
      const int64_t index = r0 / kLanePanelRows, first = r0 % kLanePanelRows;
      const int64_t count = min_i64<V>(kLanePanelRows - first, row_end - r0);
      const int8_t* bytes = w.lane_panels + index * panel_bytes;
      const PackedPanel panel{bytes,
                              reinterpret_cast<const uint16_t*>(bytes + kLanePanelRows * cols)};
      NextWeights next;
      if (r0 + count < row_end) {
        next.values = bytes + panel_bytes;
        next.scales = reinterpret_cast<const char*>(next.values + kLanePanelRows * cols);
      }
      lane_panel_tokens<V>(panel, qa, num_tokens, group_pairs, first, count, next, acc, y + r0,
                           ldy);
      r0 += count;
    }
    return;
  }
  const int64_t panel_ints = cols / 2 * kLanePanelRows;
  const int64_t scale_floats = num_groups * kLanePanelRows;
  auto* pairs = static_cast<int32_t*>(
      scratch.get(static_cast<size_t>(panel_ints + scale_floats + acc_floats) * 4));
  auto* scales = reinterpret_cast<float*>(pairs + panel_ints);
  float* acc = scales + scale_floats;
  for (int64_t r0 = row_begin; r0 < row_end; r0 += kLanePanelRows) {
    const int64_t panel_rows = min_i64<V>(kLanePanelRows, row_end - r0);
    repack_lane_panel<V>(w, r0, panel_rows, pairs, scales);
    NextWeights next;  // the rows repacked next: they arrive during this panel's products
    if (r0 + kLanePanelRows < row_end) {
      next.values = static_cast<const int8_t*>(w.data) + (r0 + kLanePanelRows) * cols;
      next.scales = reinterpret_cast<const char*>(w.scales + (r0 + kLanePanelRows) * num_groups);
    }
    lane_panel_tokens<V>(WidePanel{pairs, scales}, qa, num_tokens, group_pairs, 0, panel_rows, next,
                         acc, y + r0, ldy);
  }
}

}  // namespace pagoda::x86
