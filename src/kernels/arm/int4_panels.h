// W4A8 on int4 weights packed at load into the 4-row lane panels of arm/int8_panels.h
// (KernelTable::int4_lane_panels: the layout the table's int8 panels have): the int4-specific
// steps of its tiles, which are otherwise the int8 panel tiles, load for load and instruction
// for instruction.
//
// Why: the row-major int4 tiles (arm/int8_kernels.h, i8mm_kernels.h) hold one row per vector, so
// per 32 values they split each row's bytes into nibbles, fold the 4 rows' sums with addp,
// gather the scales one by one and (smmla) zip row pairs: about 22 static instructions per 32
// weights in Q4_0 decode where llama.cpp's repacked gemv takes 8.5, and 11 against 4 in prefill.
//
// Layout (kernels/lane_panels.h): per run of 32 columns, 16 bytes a row, in the int8 panel's
// order of the run's first 16 columns, each byte holding that column's value in its low nibble
// and the value 16 columns on in its high nibble. One 16-byte load is then two of the int8
// panel's operand vectors: the low nibbles are the vector of the run's first half, the high
// nibbles the same rows and positions 16 columns on (4 x 4: 4 rows' next 4 values, 4 x 8: a
// row pair's next 8). So the tiles take 4 loads per run of 4 rows where int8 takes 8.
//
// Nibbles are stored as q ^ 8, which read as a signed 4-bit number is q - 8. So without a
// subtraction, shl #4 of a byte makes its low nibble 16 (q - 8) as a signed byte, and and #0xf0
// its high nibble 16 (q - 8): the operands sdot / smmla take, and the integer sum of a block is
// 16 Σ (q - 8) q_x (|Σ| <= 32 * 128 * 127: no overflow). Divided by 16 (exact) it is
// Σ (q - 8) q_x, which is what the scalar table computes for symmetric int4 (dot - 8 Σ q_x):
// one scvtf with 4 fraction bits converts it to fp32; with zero points the scalar table's dot is
// Σ q q_x = that + 8 Σ q_x (one ssra onto 8 Σ q_x, then scvtf), and its min term follows. The
// integer sums are exact and the float steps are the scalar table's in its order (finish_block in
// int8_kernels.h), so every row and token gets the scalar table's bits, as from the row-major
// tiles.
#pragma once

#include <arm_neon.h>

#include <cstdint>

namespace pagoda::arm {

// What a panel holds (a template parameter of the panel tiles): int8, or int4 with or without a
// mins plane (symmetric_int4: min = -8 * scale, folded into the integer sum).
enum class PanelValues { kInt8, kInt4Symmetric, kInt4Mins };

constexpr bool is_int4(PanelValues values) {
  return values != PanelValues::kInt8;
}

// The 8 int8 operand vectors of one run of 32 columns of a 4-row int4 panel, in the int8
// panel's order (v[k] the k-th 16 bytes an int8 panel holds for the run), each value 16 (q - 8):
// v[k] from the low nibbles of the k-th 16 bytes, v[k + 4] from their high nibbles.
inline void int4_panel_run(const int8_t* run, int8x16_t (&v)[8]) {
  for (int k = 0; k < 4; ++k) {
    const int8x16_t packed = vld1q_s8(run + 16 * k);
    v[k] = vshlq_n_s8(packed, 4);
    v[k + 4] = vandq_s8(packed, vdupq_n_s8(static_cast<int8_t>(0xf0)));
  }
}

// The scalar table's integer dot of a block, as fp32, from a panel tile's sum 16 Σ (q - 8) q_x:
// Σ (q - 8) q_x for symmetric int4, converted straight from the sum as a fixed-point number with
// 4 fraction bits (scvtf #4: exact, the quotient is an integer below 2^24); Σ q q_x with zero
// points (sum_q = Σ q_x), whose integer is formed first. float(dot), as the scalar table takes it.
template <PanelValues kValues>
inline float32x4_t int4_panel_dot(int32x4_t sum16, int32_t sum_q) {
  if constexpr (kValues == PanelValues::kInt4Mins) {
    return vcvtq_f32_s32(vsraq_n_s32(vdupq_n_s32(8 * sum_q), sum16, 4));
  } else {
    return vcvtq_n_f32_s32(sum16, 4);
  }
}

}  // namespace pagoda::arm
