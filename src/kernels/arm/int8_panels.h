// W8A8 and W4A8 on int8 / int4 weights packed at load into 4-row lane panels
// (kernels/lane_panels.h), for the AArch64 tables with the dot product
// (KernelTable::int8_lane_panels, int4_lane_panels): every token count, decode included, reads
// the panels, so they replace the row-major weights. int4 panels hold the same operands two to
// a byte (arm/int4_panels.h); the tiles below take both, as PanelValues says.
//
// Why: the row-major tiles of int8_kernels.h hold one row per vector, so per 32 values they fold
// the 4 rows' sdot sums with two addp and gather the 4 rows' scales one by one (17.0 static
// instructions per 32 multiply-adds in Q8_0 decode, where llama.cpp's repacked 4-row gemv takes
// 6.5), and the smmla tiles interleave each row pair with zip1 / zip2 before every use. In a
// panel the bytes already lie as the instructions take them:
//   - sdot, 4 rows x 4 bytes (kSdotPanelRowBytes): a 16-byte load is the next 4 values of each
//     of the 4 rows, and sdot by element (vdotq_laneq_s32) multiplies them by 4 activations
//     broadcast from one lane of an activation vector, so each row's sum grows in its own lane:
//     no fold. 32 values of 4 rows are 8 loads (int4: 4 loads, 4 shl, 4 and) and 8 sdot per
//     token.
//   - smmla, 4 rows x 8 bytes (kMmlaPanelRowBytes): a 16-byte load is a row pair's next 8 values,
//     the 2 x 8 operand of smmla as it is: no zip. Decode runs the same tile on a token pair
//     whose second token repeats the first (as many instructions per product as sdot).
// Either way one 8-byte load gives the 4 rows' fp16 scales of a group (and mins), and the 4 rows
// of a token leave the tile in the lanes finish_block (int8_kernels.h) takes.
//
// The integer sums are exact and every block is finished with finish_block's float steps, so
// every row and token gets the scalar table's bits, as from the row-major tiles (the loader may
// pack or not). Included by the ISA files whose traits set kInt8PanelRowBytes
// (arm/neon_dotprod.cpp, arm/neon_i8mm.cpp, arm/neon_bf16.cpp), after int8_kernels.h (and
// i8mm_kernels.h where smmla is used).
#pragma once

#include <arm_neon.h>

#include <cstdint>

#include "kernels/arm/int4_panels.h"
#include "kernels/arm/int8_kernels.h"
#include "kernels/lane_panels.h"

namespace pagoda::arm {

inline constexpr int64_t kPanelRows = 4;
inline constexpr int kSdotPanelRowBytes = 4;
inline constexpr int kMmlaPanelRowBytes = 8;

// The panels V's tiles read, int8 and int4 alike.
template <class V>
constexpr LanePanelLayout int8_panel_layout() {
  return {kPanelRows, V::kInt8PanelRowBytes};
}

// One panel of a packed matrix: values (int8 [cols / B][4][B], int4 [cols / 32][64 bytes]),
// scales [num_groups][4] fp16, mins [num_groups][4] fp16 (int4 with zero points only).
struct Int8Panel {
  const int8_t* values;
  const uint16_t* scales;  // not necessarily 2-byte aligned: read through memcpy-like loads
  const uint16_t* mins;
  int64_t blocks_per_group;  // activation blocks of 32 per group (int4); int8: 1
};

// The 4 rows' fp16 scales (or mins) of group g, widened (exactly) to fp32.
inline float32x4_t panel_plane(const uint16_t* plane, int64_t g) {
  const uint8x8_t bits = vld1_u8(reinterpret_cast<const uint8_t*>(plane + g * kPanelRows));
  return vcvt_f32_f16(vreinterpret_f16_u8(bits));
}

// finish_block (int8_kernels.h) with the token's d and Σ q_x already loaded, from a tile's
// integer sum of the block (int4: 16 Σ (q - 8) q_x, arm/int4_panels.h): the scalar table's
// float steps in its order, acc + d * (scale * float(dot) [+ min * float(Σ q_x)]).
template <PanelValues kValues>
inline float32x4_t finish_panel_block(float32x4_t acc, int32x4_t sum, float32x4_t scale,
                                      float32x4_t min, float d, int32_t sum_q) {
  const float32x4_t dot =
      is_int4(kValues) ? int4_panel_dot<kValues>(sum, sum_q) : vcvtq_f32_s32(sum);
  float32x4_t value = vmulq_f32(scale, dot);
  if constexpr (kValues == PanelValues::kInt4Mins) {
    value = vaddq_f32(value, vmulq_f32(min, vdupq_n_f32(static_cast<float>(sum_q))));
  }
  return vaddq_f32(acc, vmulq_f32(vdupq_n_f32(d), value));
}

// What a step of 32 columns of a panel's 4 rows holds: 128 bytes of int8, 64 of int4.
template <PanelValues kValues>
constexpr int64_t kPanelStepBytes = is_int4(kValues) ? 64 : 128;

// The 8 operand vectors of the 4 rows' 32 columns at `step`, in the int8 panel's order (v[k]:
// the k-th 16 bytes an int8 panel holds for them; int4 scaled by 16, arm/int4_panels.h).
template <PanelValues kValues>
inline void panel_step(const int8_t* step, int8x16_t (&v)[8]) {
  if constexpr (is_int4(kValues)) {
    int4_panel_run(step, v);
  } else {
    for (int k = 0; k < 8; ++k) v[k] = vld1q_s8(step + 16 * k);
  }
}

// Stores the 4 rows of each of `num_tokens` tokens held in acc: rows [first, first + count) of
// the panel, row first at y, token t at y + t * ldy.
template <int kTokens>
inline void store_panel_rows(const float32x4_t (&acc)[kTokens], int num_tokens, int64_t first,
                             int64_t count, float* y, int64_t ldy) {
  for (int t = 0; t < num_tokens; ++t) {
    float rows4[4];
    vst1q_f32(rows4, acc[t]);
    for (int64_t r = 0; r < count; ++r) y[t * ldy + r] = rows4[first + r];
  }
}

// One sdot panel (4 x 4 bytes) x kTokens tokens from `token`; rows [first, first + count) are
// stored. kGroup32: groups of 32 (Q8_0, Q4_0, Q4_K), so a group is one block of one step and
// the loops inside a group go (int8 per channel: one block per row, many steps; int4 in groups
// of 128: 4 blocks of one step). Out of line so that the disassembly names the tile
// (bench/peers/aarch64_inner_loops.py).
template <class V, PanelValues kValues, int kTokens, bool kGroup32>
[[gnu::noinline]] void sdot_panel_tile(const QuantizedActivations& qa, int64_t token,
                                       const Int8Panel& panel, int64_t first, int64_t count,
                                       float* y, int64_t ldy) {
  constexpr int64_t kStepBytes = kPanelStepBytes<kValues>;
  const int64_t cols = qa.cols, num_blocks = qa.num_blocks;
  const int64_t block = kGroup32 || is_int4(kValues) ? kQuantBlock : qa.block;
  const int64_t blocks_per_group = kGroup32 ? 1 : panel.blocks_per_group;
  // Locals, so that the block loop does not reload them after every store-free step.
  const int8_t* const values = panel.values;
  const int8_t* const x = qa.q + token * cols;
  const float* const d = qa.d + token * num_blocks;
  const int32_t* const sum_q = qa.sum_q + token * num_blocks;
  float32x4_t acc[kTokens];
  for (int t = 0; t < kTokens; ++t) acc[t] = vdupq_n_f32(0.0f);
  for (int64_t g = 0; g < num_blocks / blocks_per_group; ++g) {
    const float32x4_t scale = panel_plane(panel.scales, g);
    const float32x4_t min =
        kValues == PanelValues::kInt4Mins ? panel_plane(panel.mins, g) : vdupq_n_f32(0.0f);
    for (int64_t b = g * blocks_per_group; b < (g + 1) * blocks_per_group; ++b) {
      // Two sums per token, even and odd chunks, so that a token's sdot do not wait on each
      // other one by one; added once per block (integers: exact in any order).
      int32x4_t even[kTokens], odd[kTokens];
      for (int t = 0; t < kTokens; ++t) even[t] = odd[t] = vdupq_n_s32(0);
      for (int64_t c = b * block; c < (b + 1) * block; c += kQuantBlock) {
        const int8_t* wc = values + c * (kStepBytes / kQuantBlock);  // 32 values of 4 rows
        if constexpr (kTokens == 1) {  // decode: one stream from DRAM, 16 steps ahead
          V::prefetch_l2(wc + 16 * kStepBytes);
          if constexpr (kStepBytes > 64) V::prefetch_l2(wc + 16 * kStepBytes + 64);
        }
        int8x16_t w[8];  // w[k]: values c + 4k .. c + 4k + 3 of rows 0..3
        panel_step<kValues>(wc, w);
        for (int t = 0; t < kTokens; ++t) {
          const int8x16_t x_lo = vld1q_s8(x + t * cols + c);
          const int8x16_t x_hi = vld1q_s8(x + t * cols + c + 16);
          even[t] = vdotq_laneq_s32(even[t], w[0], x_lo, 0);
          odd[t] = vdotq_laneq_s32(odd[t], w[1], x_lo, 1);
          even[t] = vdotq_laneq_s32(even[t], w[2], x_lo, 2);
          odd[t] = vdotq_laneq_s32(odd[t], w[3], x_lo, 3);
          even[t] = vdotq_laneq_s32(even[t], w[4], x_hi, 0);
          odd[t] = vdotq_laneq_s32(odd[t], w[5], x_hi, 1);
          even[t] = vdotq_laneq_s32(even[t], w[6], x_hi, 2);
          odd[t] = vdotq_laneq_s32(odd[t], w[7], x_hi, 3);
        }
      }
      for (int t = 0; t < kTokens; ++t) {
        acc[t] = finish_panel_block<kValues>(acc[t], vaddq_s32(even[t], odd[t]), scale, min,
                                             d[t * num_blocks + b], sum_q[t * num_blocks + b]);
      }
    }
  }
  store_panel_rows<kTokens>(acc, kTokens, first, count, y, ldy);
}

// The smmla panel tile (4 x 8 bytes) of the files whose V has kMatrixMultiply: defined in
// arm/i8mm_kernels.h. kTokens tokens from `token` (even), read from x_pairs as
// (kTokens + 1) / 2 pairs; kGroup32 as for sdot_panel_tile.
template <class V, PanelValues kValues, int kTokens, bool kGroup32>
void mmla_panel_tile(const QuantizedActivations& qa, const int8_t* x_pairs, int64_t token,
                     const Int8Panel& panel, int64_t first, int64_t count, float* y, int64_t ldy);

// Calls f.template operator()<kValues, kGroup32>() for what w's panels hold.
template <class F>
void with_panel_values(const WeightView& w, F&& f) {
  const bool group32 = w.group_size == kQuantBlock;
  if (w.dtype == DType::kI8) {
    group32 ? f.template operator()<PanelValues::kInt8, true>()
            : f.template operator()<PanelValues::kInt8, false>();
  } else if (w.symmetric_int4) {
    group32 ? f.template operator()<PanelValues::kInt4Symmetric, true>()
            : f.template operator()<PanelValues::kInt4Symmetric, false>();
  } else {
    group32 ? f.template operator()<PanelValues::kInt4Mins, true>()
            : f.template operator()<PanelValues::kInt4Mins, false>();
  }
}

// Every token of the call against packed rows [row_begin, row_end), a panel at a time; a range
// that does not start on a panel (tests; ops splits rows at multiples of 16) computes the whole
// panel and stores its part.
template <class V>
void matmul_int8_panels(const float* x, int64_t num_tokens, const WeightView& w, int64_t row_begin,
                        int64_t row_end, float* y, int64_t ldy) {
  const int64_t cols = w.cols, num_groups = cols / w.group_size;
  const bool int4 = w.dtype == DType::kI4;
  // The activation blocks of the row-major tiles: the group for int8, 32 values for int4.
  const int64_t block = int4 ? kQuantBlock : w.group_size;
  const QuantizedActivations qa = quantize_activations<V>(x, num_tokens, cols, block);
  const LanePanelLayout layout = int8_panel_layout<V>();
  const int64_t panel_bytes = lane_panel_bytes(w, layout);
  const int64_t scales_at = kPanelRows * dtype_row_bytes(w.dtype, cols);
  const int64_t mins_at = scales_at + kPanelRows * num_groups * 2;
  [[maybe_unused]] const int8_t* x_pairs = nullptr;
  if constexpr (V::kMatrixMultiply) x_pairs = pair_activations<V>(qa, num_tokens);
  // What the panels hold is chosen once a call, outside the loop over panels.
  with_panel_values(w, [&]<PanelValues kValues, bool kGroup32>() {
    for (int64_t r0 = row_begin; r0 < row_end;) {
      const int64_t first = r0 % kPanelRows;
      const int64_t count = simd::min_i64<V>(kPanelRows - first, row_end - r0);
      const int8_t* bytes = w.lane_panels + r0 / kPanelRows * panel_bytes;
      const Int8Panel panel{bytes, reinterpret_cast<const uint16_t*>(bytes + scales_at),
                            reinterpret_cast<const uint16_t*>(bytes + mins_at),
                            int4 ? w.group_size / kQuantBlock : 1};
      float* const y_rows = y + r0;
      if constexpr (V::kMatrixMultiply) {
        for (int64_t t = 0; t < num_tokens; t += V::kIntTileTokens) {
          simd::with_tile_shape<V, 1, V::kIntTileTokens>(1, num_tokens - t, [&]<int R, int T>() {
            mmla_panel_tile<V, kValues, T, kGroup32>(qa, x_pairs, t, panel, first, count,
                                                     y_rows + t * ldy, ldy);
          });
        }
      } else {
        const int64_t tile_tokens = num_tokens < kIntManyTokens ? 1 : V::kIntTileTokens;
        for (int64_t t = 0; t < num_tokens; t += tile_tokens) {
          const int64_t tokens = simd::min_i64<V>(tile_tokens, num_tokens - t);
          simd::with_tile_shape<V, 1, V::kIntTileTokens>(1, tokens, [&]<int R, int T>() {
            sdot_panel_tile<V, kValues, T, kGroup32>(qa, t, panel, first, count, y_rows + t * ldy,
                                                     ldy);
          });
        }
      }
      r0 += count;
    }
  });
}

}  // namespace pagoda::arm
