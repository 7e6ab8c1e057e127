// The starting table of every AArch64 variant: the shared SIMD templates (simd/simd_kernels.h)
// plus the entries that AArch64 vectorises where the shared templates fall back to plain
// per-element code. Each ISA file builds its table from this one (arm/neon*.cpp).
//
// Interleaved (GPT-J) rope: DeepSeek-V2/V3's MLA rotates its rope dims in pairs (2i, 2i + 1)
// (HF DeepseekV2's apply_rotary_pos_emb de-interleaves them first), once per head and token,
// and the shared template does those pairs one at a time. ld2 / st2 split and rejoin the pairs
// in registers, so 4 pairs take one pass; the arithmetic (two products, then a difference or
// a sum, unfused: -ffp-contract=off on AArch64) is the scalar table's, so the bits are too.
// Armv8.0-A instructions only: every AArch64 file may include this.
#pragma once

#include <arm_neon.h>

#include <cstdint>

#include "kernels/simd/simd_kernels.h"

namespace pagoda::arm {

template <class V>
void rope(const float* x, const float* cos, const float* sin, int64_t rotary_dim, bool neox,
          float* out) {
  if (neox) {
    simd::rope<V>(x, cos, sin, rotary_dim, neox, out);
    return;
  }
  const int64_t half = rotary_dim / 2;
  int64_t i = 0;
  for (; i + 4 <= half; i += 4) {                      // loads before stores: out == x is safe
    const float32x4x2_t pairs = vld2q_f32(x + 2 * i);  // val[0]: x[2i], val[1]: x[2i + 1]
    const float32x4_t c = vld1q_f32(cos + i), s = vld1q_f32(sin + i);
    float32x4x2_t rotated;
    rotated.val[0] = vsubq_f32(vmulq_f32(pairs.val[0], c), vmulq_f32(pairs.val[1], s));
    rotated.val[1] = vaddq_f32(vmulq_f32(pairs.val[1], c), vmulq_f32(pairs.val[0], s));
    vst2q_f32(out + 2 * i, rotated);
  }
  for (; i < half; ++i) {
    const float a = x[2 * i], b = x[2 * i + 1];
    out[2 * i] = a * cos[i] - b * sin[i];
    out[2 * i + 1] = b * cos[i] + a * sin[i];
  }
}

template <class V>
KernelTable make_table(const char* isa) {
  KernelTable t = simd::make_table<V>(isa);
  t.rope = rope<V>;
  return t;
}

}  // namespace pagoda::arm
