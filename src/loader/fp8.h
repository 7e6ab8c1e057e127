// The float8 e4m3fn format (OCP 8-bit floating point, "E4M3"; torch.float8_e4m3fn, safetensors
// "F8_E4M3"), the element type of DeepSeek-V3/R1's published weights: 1 sign bit, 4 exponent
// bits with bias 7, 3 mantissa bits. Exponent 0 holds subnormals (m * 2^-9); there is no
// infinity, and only S.1111.111 (0x7F, 0xFF) is NaN, so the largest finite value is 448.
#pragma once

#include <cstdint>

namespace pagoda {

inline constexpr float kE4m3Max = 448.0f;

// One code widened to fp32 (exact: every e4m3 value is an fp32 value).
float e4m3_to_f32(uint8_t code);

// dst[i] = decode(src[i]) * scale for n codes. The product is rounded once, in fp32, as
// DeepSeek's reference dequantization (weight.float() * scale_inv) rounds it.
void e4m3_to_f32_scaled(const uint8_t* src, int64_t n, float scale, float* dst);

// The nearest e4m3 code to x, ties to the even code; magnitudes beyond 448 saturate to +-448
// (the "satfinite" conversion quantizers use) and NaN becomes 0x7F.
uint8_t f32_to_e4m3(float x);

}  // namespace pagoda
