#include "loader/fp8.h"

#include <array>
#include <bit>
#include <cmath>

namespace pagoda {
namespace {

// The value of a code, from its fields: fp32 has room for every normal e4m3 value by moving
// the exponent from bias 7 to bias 127 and the mantissa to the top of fp32's 23 bits;
// subnormals are m * 2^-9, exact in fp32 too.
float decode(uint8_t code) {
  const uint32_t sign = static_cast<uint32_t>(code >> 7) << 31;
  const uint32_t exponent = (code >> 3) & 0xF;
  const uint32_t mantissa = code & 0x7;
  if (exponent == 0xF && mantissa == 0x7) return std::bit_cast<float>(sign | 0x7FC00000u);
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 0x1p-9f;
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | (exponent - 7 + 127) << 23 | mantissa << 20);
}

// Single codes (the encoder's search, tests) read a table built once from decode().
const std::array<float, 256>& table() {
  static const std::array<float, 256> t = [] {
    std::array<float, 256> values{};
    for (int c = 0; c < 256; ++c) values[static_cast<size_t>(c)] = decode(static_cast<uint8_t>(c));
    return values;
  }();
  return t;
}

}  // namespace

float e4m3_to_f32(uint8_t code) {
  return table()[code];
}

// The same fields as decode(), computed with integer selects instead of a table so the loop
// vectorises (no gathers needed): the magnitude bits shifted into place plus the exponent rebias
// for normals, m * 2^-9 for subnormals, NaN for S.1111.111, then the sign.
void e4m3_to_f32_scaled(const uint8_t* src, int64_t n, float scale, float* dst) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t code = src[i];
    const uint32_t magnitude = code & 0x7F;
    const uint32_t normal = (magnitude << 20) + ((127u - 7u) << 23);
    const uint32_t subnormal = std::bit_cast<uint32_t>(static_cast<float>(code & 7) * 0x1p-9f);
    uint32_t bits = magnitude >= 8 ? normal : subnormal;
    bits = magnitude == 0x7F ? 0x7FC00000u : bits;
    dst[i] = std::bit_cast<float>(bits | (code & 0x80) << 24) * scale;
  }
}

uint8_t f32_to_e4m3(float x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const float a = std::fabs(x);
  const std::array<float, 256>& t = table();
  // Codes 0x00..0x7E are the non-negative finite values in increasing order: find the first
  // at or above a, then pick the nearer neighbour (the even code on a tie, as adjacent codes
  // differ in the last mantissa bit).
  int hi = 0;
  while (hi < 0x7E && t[static_cast<size_t>(hi)] < a) ++hi;
  if (hi == 0 || t[static_cast<size_t>(hi)] < a) return static_cast<uint8_t>(sign | hi);
  const int lo = hi - 1;
  const float below = a - t[static_cast<size_t>(lo)], above = t[static_cast<size_t>(hi)] - a;
  const int code = below < above ? lo : above < below ? hi : (lo % 2 == 0 ? lo : hi);
  return static_cast<uint8_t>(sign | code);
}

}  // namespace pagoda
