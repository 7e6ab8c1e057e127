// The AArch64 Advanced SIMD (NEON) vector traits for the shared SIMD templates
// (simd/simd_kernels.h): 4 fp32 lanes in a 128-bit q register. Only Armv8.0-A instructions, so
// that neon.cpp (plain Armv8-A) and neon_dotprod.cpp (Armv8.2-A + dotprod + fp16) can both
// derive from it; each adds its integer dot product (arm/int8_kernels.h).
//
// Included by the AArch64 ISA files only, and its struct lives in an anonymous namespace so
// that each ISA file gets its own copy (the ODR rules of simd/simd_kernels.h).
#pragma once

#include <arm_neon.h>

#include <cstdint>

namespace pagoda::detail {
namespace {

struct NeonBase {
  using F = float32x4_t;
  static constexpr int kLanes = 4;
  static constexpr int kVectorRegisters = 32;  // v0-v31
  // Register tiles for the 32 q registers, as AVX-512's for its 32 zmm (not measured on ARM
  // hardware: none here): 4 x 6 = 24 accumulators + 4 weight vectors + x.
  static constexpr int kTileRows = 4;
  static constexpr int kTileTokens = 6;
  static constexpr int kStreamTileTokens = 6;
  static constexpr int kBf16TileTokens = 4;
  static constexpr int kSweepRows = 4;
  static constexpr int kSweepTokens = 6;
  // W8A8 / W4A8 (arm/int8_kernels.h): tokens per 4-row tile for many tokens: 4 x 4 int32
  // accumulators + 4 float accumulators + 8 weight vectors + 2 activation vectors.
  static constexpr int kIntTileTokens = 4;
  // Whether the many-token W8A8 / W4A8 tiles use smmla (arm/i8mm_kernels.h).
  static constexpr bool kMatrixMultiply = false;
  // W8A8 / W4A8 on lane panels packed at load (arm/int8_panels.h, arm/int4_panels.h): the int8
  // values of a row kept together in a 4-row panel (4: sdot by element, 8: smmla); 0: row-major
  // int8 and int4 only.
  static constexpr int kInt8PanelRowBytes = 0;

  // The ISA-specific helpers of the shared templates.
  static void prefetch_l2(const void* p) { __builtin_prefetch(p, 0, 2); }
  static float sqrt_scalar(float v) { return vgetq_lane_f32(vsqrtq_f32(vdupq_n_f32(v)), 0); }
  static void keep_in_register(F& v) { __asm__("" : "+w"(v)); }
  static float16x4_t as_f16(uint16x4_t bits) { return vreinterpret_f16_u16(bits); }
  static float half_to_float(uint16_t h) {
    return vgetq_lane_f32(vcvt_f32_f16(as_f16(vdup_n_u16(h))), 0);
  }

  static F zero() { return vdupq_n_f32(0.0f); }
  static F set1(float v) { return vdupq_n_f32(v); }
  static F load(const float* p) { return vld1q_f32(p); }
  static void store(float* p, F v) { vst1q_f32(p, v); }
  // Partial vectors go through a small block on the stack: there is no masked load in NEON,
  // and the tails are one vector per row.
  static F load_n_fill(const float* p, int n, float fill) {
    float block[4] = {fill, fill, fill, fill};
    for (int i = 0; i < n && i < 4; ++i) block[i] = p[i];
    return vld1q_f32(block);
  }
  static F load_n(const float* p, int n) { return load_n_fill(p, n, 0.0f); }
  static uint32x4_t lanes_below(int n) {
    const uint32_t index[4] = {0, 1, 2, 3};
    return vcltq_u32(vld1q_u32(index), vdupq_n_u32(static_cast<uint32_t>(n < 0 ? 0 : n)));
  }
  static F mask_n(F v, int n) {
    return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(v), lanes_below(n)));
  }
  static void store_n(float* p, F v, int n) {
    float block[4];
    vst1q_f32(block, v);
    for (int i = 0; i < n && i < 4; ++i) p[i] = block[i];
  }

  // bf16 is the top half of fp32: shift left into place. f16 by fcvtl (exact).
  static F widen_bf16(uint16x4_t h) { return vreinterpretq_f32_u32(vshll_n_u16(h, 16)); }
  static F load_bf16(const uint16_t* p) { return widen_bf16(vld1_u16(p)); }
  static F load_f16(const uint16_t* p) { return vcvt_f32_f16(as_f16(vld1_u16(p))); }
  static uint16x4_t load_16_n(const uint16_t* p, int n) {
    uint16_t block[4] = {};  // 0x0000 is +0 in both formats
    for (int i = 0; i < n && i < 4; ++i) block[i] = p[i];
    return vld1_u16(block);
  }
  static F load_bf16_n(const uint16_t* p, int n) { return widen_bf16(load_16_n(p, n)); }
  static F load_f16_n(const uint16_t* p, int n) { return vcvt_f32_f16(as_f16(load_16_n(p, n))); }

  // fp32 narrowed to 16 bits, rounding to nearest even as util/half.h does: f16 by fcvtn (the
  // FPCR's default rounding, nearest even); bf16 by adding 0x7fff plus the lowest kept bit,
  // except that a NaN keeps its top bits with the quiet bit set.
  static uint16x4_t narrow_f16(F v) { return vreinterpret_u16_f16(vcvt_f16_f32(v)); }
  static uint16x4_t narrow_bf16(F v) {
    const uint32x4_t bits = vreinterpretq_u32_f32(v);
    const uint32x4_t lowest_kept = vandq_u32(vshrq_n_u32(bits, 16), vdupq_n_u32(1));
    const uint32x4_t rounded =
        vshrq_n_u32(vaddq_u32(bits, vaddq_u32(vdupq_n_u32(0x7fff), lowest_kept)), 16);
    const uint32x4_t quiet_nan = vorrq_u32(vshrq_n_u32(bits, 16), vdupq_n_u32(0x40));
    const uint32x4_t is_number = vceqq_f32(v, v);
    return vmovn_u32(vbslq_u32(is_number, rounded, quiet_nan));
  }
  static void store_16_n(uint16_t* p, uint16x4_t h, int n) {
    uint16_t block[4];
    vst1_u16(block, h);
    for (int i = 0; i < n && i < 4; ++i) p[i] = block[i];
  }
  static void store_f16(uint16_t* p, F v) { vst1_u16(p, narrow_f16(v)); }
  static void store_bf16(uint16_t* p, F v) { vst1_u16(p, narrow_bf16(v)); }
  static void store_f16_n(uint16_t* p, F v, int n) { store_16_n(p, narrow_f16(v), n); }
  static void store_bf16_n(uint16_t* p, F v, int n) { store_16_n(p, narrow_bf16(v), n); }

  // 8 bf16 values as fp32: lane j of even = p[2j], of odd = p[2j + 1] (see simd_kernels.h).
  static void split_bf16_pairs(uint32x4_t v, F& even, F& odd) {
    even = vreinterpretq_f32_u32(vshlq_n_u32(v, 16));
    odd = vreinterpretq_f32_u32(vandq_u32(v, vdupq_n_u32(0xffff0000u)));
  }
  static void load_bf16_even_odd(const uint16_t* p, F& even, F& odd) {
    split_bf16_pairs(vreinterpretq_u32_u16(vld1q_u16(p)), even, odd);
  }
  static void load_bf16_even_odd_n(const uint16_t* p, int n, F& even, F& odd) {
    uint16_t block[8] = {};
    for (int i = 0; i < n && i < 8; ++i) block[i] = p[i];
    load_bf16_even_odd(block, even, odd);
  }

  // 4 int8 / 4-bit values as fp32; load_u4 takes the nibble at bit `shift` of 4 bytes.
  static uint8x8_t load_4_bytes(const void* p) {
    uint32_t word;
    __builtin_memcpy(&word, p, 4);
    return vreinterpret_u8_u32(vdup_n_u32(word));
  }
  static F load_i8(const int8_t* p) {
    const int16x8_t wide = vmovl_s8(vreinterpret_s8_u8(load_4_bytes(p)));
    return vcvtq_f32_s32(vmovl_s16(vget_low_s16(wide)));
  }
  static F load_u4(const uint8_t* p, int shift) {
    const uint32x4_t bytes = vmovl_u16(vget_low_u16(vmovl_u8(load_4_bytes(p))));
    const uint32x4_t nibbles =
        vandq_u32(vshlq_u32(bytes, vdupq_n_s32(-shift)), vdupq_n_u32(15));  // shift right
    return vcvtq_f32_u32(nibbles);
  }

  static F add(F a, F b) { return vaddq_f32(a, b); }
  static F sub(F a, F b) { return vsubq_f32(a, b); }
  static F mul(F a, F b) { return vmulq_f32(a, b); }
  static F div(F a, F b) { return vdivq_f32(a, b); }
  static F max(F a, F b) { return vmaxq_f32(a, b); }
  static F fma(F a, F b, F c) { return vfmaq_f32(c, a, b); }
  static float reduce_add(F v) { return vaddvq_f32(v); }
  static float reduce_max(F v) { return vmaxvq_f32(v); }

  // e^x as the x86 traits compute it (Cephes expf's degree-6 polynomial after x = n ln2 + r,
  // relative error ~2e-7), clamped to [-87.3, 88] where the result is a normal finite float.
  static F exp(F x) {
    x = vminq_f32(vmaxq_f32(x, set1(-87.3365f)), set1(88.0f));
    const F n = vrndnq_f32(vmulq_f32(x, set1(1.44269504088896341f)));
    F r = vfmsq_f32(x, n, set1(0.693359375f));
    r = vfmsq_f32(r, n, set1(-2.12194440e-4f));
    F p = set1(1.9875691500e-4f);
    p = fma(p, r, set1(1.3981999507e-3f));
    p = fma(p, r, set1(8.3334519073e-3f));
    p = fma(p, r, set1(4.1665795894e-2f));
    p = fma(p, r, set1(1.6666665459e-1f));
    p = fma(p, r, set1(5.0000001201e-1f));
    p = fma(p, vmulq_f32(r, r), vaddq_f32(r, set1(1.0f)));
    const int32x4_t bits = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    return vmulq_f32(p, vreinterpretq_f32_s32(bits));
  }
};

}  // namespace
}  // namespace pagoda::detail
