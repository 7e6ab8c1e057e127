// W8A8 / W4A8 on SVE (WeightView::int8_activations): the integer matmul of arm/sve.cpp, with
// the tile's rows in the vector's 64-bit lanes, so that one svdot does as many multiply-adds as
// the vector is wide. Vector-length agnostic: a tile is svcntd() rows (4 at 256 bits, 8 at 512),
// read at run time; no length is compiled in.
//
// Why rows in lanes: a row's quantization block is only 32 values (GGUF Q8_0 / Q4_0), so a
// layout with a row's values along the vector would need a horizontal sum per row and block,
// and at 512 bits one row's block fills only half a vector. Instead each 64-bit lane i loads
// 8 bytes of row i (a gather with one offset per row) and the activations' same 8 bytes are
// broadcast to every lane (ld1rd): svdot then sums 4 products per 32-bit lane, lanes 2i and
// 2i + 1 holding row i's two halves, which one uzp1 / uzp2 / add folds after each block, rows
// in the low 32-bit lanes. Per 8 weights of a tile that is one gather, and per token one
// broadcast and one svdot: at 256 bits 32 multiply-adds per svdot, as smmla; at 512, 64.
//
// The arithmetic is the scalar table's term for term, as arm/int8_kernels.h's (whose
// activation quantization this reuses): per block an exact int32 dot product, then
//   int8: block = scale_g * dot          int4: block = scale_g * dot (+ min_g * sum(q_x))
//   acc += d_b * block                   (symmetric int4: dot - 8 sum(q_x), no min term)
// as separate multiplies and adds in block order, one row per lane. So every row's result is
// the scalar table's bits, whatever the vector length or tile.
//
// Included by arm/sve.cpp only (compiled with +sve); templates on its traits V so that nothing
// here is shared with a file compiled for another ISA (the ODR rules of simd/simd_kernels.h).
#pragma once

#include <arm_sve.h>

#include <cstdint>
#include <cstring>

#include "kernels/arm/int8_kernels.h"

namespace pagoda::arm::sve {

// 8 bytes of activations in every 64-bit lane.
inline svint8_t broadcast_8_bytes(const int8_t* p) {
  uint64_t word;
  std::memcpy(&word, p, 8);
  return svreinterpret_s8_u64(svdup_n_u64(word));
}

// fp16 bits gathered into the low half of each 32-bit lane (offsets in bytes), widened
// exactly to fp32.
inline svfloat32_t gather_f16(const uint16_t* base, svuint32_t offsets) {
  const svbool_t all = svptrue_b32();
  const svuint32_t bits = svld1uh_gather_u32offset_u32(all, base, offsets);
  return svcvt_f32_f16_x(all, svreinterpret_f16_u32(bits));
}

// Rows [row, row + num_rows) (num_rows <= svcntd()) x kTokens tokens from `token`, one row per
// 64-bit lane. Lanes past num_rows repeat the last row (computed, never stored). Out of line so
// that the disassembly names each tile (bench/peers/aarch64_inner_loops.py).
template <class V, DType kType, int kTokens>
[[gnu::noinline]] void svdot_tile(const QuantizedActivations& qa, int64_t token,
                                  const WeightView& w, int64_t row, int64_t num_rows, float* y,
                                  int64_t ldy) {
  const int64_t cols = qa.cols, block = qa.block, num_groups = cols / w.group_size;
  const int64_t row_bytes = kType == DType::kI8 ? cols : cols / 2;
  const svbool_t all8 = svptrue_b8(), all32 = svptrue_b32(), all64 = svptrue_b64();
  const uint64_t last_row = static_cast<uint64_t>(num_rows - 1);
  // Lane i's row within the tile: min(i, num_rows - 1), as a weight offset in bytes.
  const svuint64_t w_offsets =
      svmul_n_u64_x(all64, svmin_n_u64_x(all64, svindex_u64(0, 1), last_row), row_bytes);
  const uint8_t* w_tile = static_cast<const uint8_t*>(w.data) + row * row_bytes;
  // The same rows in 32-bit lanes (the folded sums' layout), as offsets into the scale planes.
  const svuint32_t s_offsets =
      svmul_n_u32_x(all32, svmin_n_u32_x(all32, svindex_u32(0, 1), static_cast<uint32_t>(last_row)),
                    static_cast<uint32_t>(num_groups * 2));
  const uint16_t* scales = w.scales + row * num_groups;
  const bool asymmetric_int4 = kType == DType::kI4 && !w.symmetric_int4;
  const uint16_t* mins = asymmetric_int4 ? w.mins + row * num_groups : nullptr;

  // One int32 sum and one fp32 accumulator per token (SVE vectors cannot be array elements):
  // for_each_token(f) calls f(dot, acc, t) for t < kTokens.
  static_assert(kTokens >= 1 && kTokens <= 4);
  svint32_t dot0, dot1, dot2, dot3;
  svfloat32_t acc0 = svdup_n_f32(0.0f), acc1 = acc0, acc2 = acc0, acc3 = acc0;
  auto for_each_token = [&](auto&& f) {
    f(dot0, acc0, 0);
    if constexpr (kTokens > 1) f(dot1, acc1, 1);
    if constexpr (kTokens > 2) f(dot2, acc2, 2);
    if constexpr (kTokens > 3) f(dot3, acc3, 3);
  };
  // Block b's weight group: b itself for int8 (its blocks are its groups); int4's 32-value
  // blocks counted through their groups, not divided (integer division is not pipelined on
  // the cores this targets, and a block of a decode tile is a few cycles' work).
  const int64_t blocks_per_group = w.group_size / block;
  int64_t int4_group = 0, block_in_group = 0;
  for (int64_t b = 0; b < qa.num_blocks; ++b) {
    const int64_t g = kType == DType::kI8 ? b : int4_group;
    const svfloat32_t scale = gather_f16(scales + g, s_offsets);
    const svfloat32_t min = asymmetric_int4 ? gather_f16(mins + g, s_offsets) : svdup_n_f32(0.0f);
    for_each_token([](svint32_t& dot, svfloat32_t&, int) { dot = svdup_n_s32(0); });
    for (int64_t c = b * block; c < (b + 1) * block; c += kQuantBlock) {
      if constexpr (kTokens == 1) {  // decode: the rows' streams from DRAM, 256 values ahead
        const int64_t ahead = c + 8 * kQuantBlock;
        svprfb_gather_u64offset(all64, w_tile + (kType == DType::kI8 ? ahead : ahead / 2),
                                w_offsets, SV_PLDL2KEEP);
      }
      if constexpr (kType == DType::kI8) {
        for (int k = 0; k < kQuantBlock; k += 8) {  // 8 values of every row, then every token
          const svint8_t wk = svreinterpret_s8_u64(svld1_gather_u64offset_u64(
              all64, reinterpret_cast<const uint64_t*>(w_tile + c + k), w_offsets));
          for_each_token([&](svint32_t& dot, svfloat32_t&, int t) {
            const int8_t* xq = qa.q + (token + t) * cols + c + k;
            dot = svdot_s32(dot, wk, broadcast_8_bytes(xq));
          });
        }
      } else {  // a run of 32: byte j holds value j (low nibble) and j + 16 (high nibble)
        for (int k = 0; k < kQuantBlock / 2; k += 8) {
          const svuint8_t packed = svreinterpret_u8_u64(svld1_gather_u64offset_u64(
              all64, reinterpret_cast<const uint64_t*>(w_tile + c / 2 + k), w_offsets));
          const svint8_t lo = svreinterpret_s8_u8(svand_n_u8_x(all8, packed, 15));
          const svint8_t hi = svreinterpret_s8_u8(svlsr_n_u8_x(all8, packed, 4));
          for_each_token([&](svint32_t& dot, svfloat32_t&, int t) {
            const int8_t* xq = qa.q + (token + t) * cols + c + k;
            dot = svdot_s32(dot, lo, broadcast_8_bytes(xq));
            dot = svdot_s32(dot, hi, broadcast_8_bytes(xq + 16));
          });
        }
      }
    }
    for_each_token([&](svint32_t& halves, svfloat32_t& acc, int t) {
      // Lanes 2i and 2i + 1 hold row i's halves: row i's exact sum into lane i.
      svint32_t dot = svadd_s32_x(all32, svuzp1_s32(halves, halves), svuzp2_s32(halves, halves));
      const int64_t at = (token + t) * qa.num_blocks + b;
      const int32_t sum_q = qa.sum_q[at];
      if (kType == DType::kI4 && w.symmetric_int4) dot = svsub_n_s32_x(all32, dot, 8 * sum_q);
      svfloat32_t value = svmul_f32_x(all32, scale, svcvt_f32_s32_x(all32, dot));
      if (asymmetric_int4) {
        value = svadd_f32_x(all32, value, svmul_n_f32_x(all32, min, static_cast<float>(sum_q)));
      }
      acc = svadd_f32_x(all32, acc, svmul_f32_x(all32, svdup_n_f32(qa.d[at]), value));
    });
    if (kType == DType::kI4 && ++block_in_group == blocks_per_group) {
      block_in_group = 0;
      ++int4_group;
    }
  }
  const svbool_t stored = svwhilelt_b32(int64_t{0}, num_rows);  // rows are adjacent in y
  for_each_token([&](svint32_t&, svfloat32_t& acc, int t) { svst1_f32(stored, y + t * ldy, acc); });
}

// Tokens per tile from kIntManyTokens on: each gather of the rows' weights serves this many
// tokens. Every svdot takes a broadcast of its token's activations either way, so more tokens
// would save gathers only (one per 8 weights of the tile against 4 broadcasts and 4 svdot).
constexpr int kTileTokens = 4;

// body.template operator()<T>() with T = min(tokens, kMax): edge tiles get fewer tokens.
template <int kMax, class Body>
inline void with_tile_tokens(int64_t tokens, Body&& body) {
  if constexpr (kMax > 1) {
    if (tokens < kMax) return with_tile_tokens<kMax - 1>(tokens, body);
  }
  body.template operator()<kMax>();
}

template <class V, DType kType>
void matmul_int8_activations(const float* x, int64_t num_tokens, const WeightView& w,
                             int64_t row_begin, int64_t row_end, float* y, int64_t ldy) {
  const int64_t block = kType == DType::kI8 ? w.group_size : kQuantBlock;
  const QuantizedActivations qa = quantize_activations<V>(x, num_tokens, w.cols, block);
  const int64_t tile_rows = static_cast<int64_t>(svcntd());
  const int64_t tile_tokens = num_tokens < kIntManyTokens ? 1 : kTileTokens;
  for (int64_t r = row_begin; r < row_end; r += tile_rows) {
    const int64_t rows = row_end - r < tile_rows ? row_end - r : tile_rows;
    for (int64_t t = 0; t < num_tokens; t += tile_tokens) {
      const int64_t tokens = num_tokens - t < tile_tokens ? num_tokens - t : tile_tokens;
      with_tile_tokens<kTileTokens>(tokens, [&]<int T>() {
        sve::svdot_tile<V, kType, T>(qa, t, w, r, rows, y + t * ldy + r, ldy);
      });
    }
  }
}

}  // namespace pagoda::arm::sve
