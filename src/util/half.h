// Scalar conversions between fp32 and the 16-bit float formats weights are stored in.
// The SIMD kernels have their own vector versions; these are the reference.
#pragma once

#include <cstdint>
#include <cstring>

namespace pagoda {

using bf16_t = uint16_t;  // bfloat16 bits: the top half of an IEEE fp32
using f16_t = uint16_t;   // IEEE binary16 bits

inline float bf16_to_f32(bf16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Round to nearest even, as PyTorch does; NaN stays NaN.
inline bf16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<bf16_t>(bits >> 16);
}

inline float f16_to_f32(f16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      exponent = 127 - 15 + 1;
      while ((mantissa & 0x400u) == 0) {
        mantissa <<= 1;
        --exponent;
      }
      mantissa &= 0x3ffu;
      bits = sign | (exponent << 23) | (mantissa << 13);
    }
  } else if (exponent == 31) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Round to nearest even; overflow goes to infinity; a NaN stays a NaN, made quiet, with the top
// of its payload (what x86's vcvtps2ph gives, so the SIMD KV cache write matches bit for bit).
inline f16_t f32_to_f16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<f16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  if (abs >= 0x477ff000u) return static_cast<f16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {                                            // subnormal or zero
    float a;
    std::memcpy(&a, &abs, sizeof a);
    // 2^-24 is the smallest subnormal. Scaling by 2^24 is exact, and so is the fraction
    // left after truncation, so this rounds to nearest even exactly.
    const float scaled = a * 16777216.0f;  // a / 2^-24
    uint32_t m = static_cast<uint32_t>(scaled);
    const float rest = scaled - static_cast<float>(m);
    if (rest > 0.5f || (rest == 0.5f && (m & 1u))) ++m;
    return static_cast<f16_t>(sign | m);
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return static_cast<f16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

}  // namespace pagoda
