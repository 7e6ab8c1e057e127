// The scalar fp32 <-> fp16 / bf16 conversions every kernel is checked against (util/half.h):
// hand-worked roundings, and every 16-bit value surviving the trip through fp32 unchanged.
#include "util/half.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include <gtest/gtest.h>

namespace pagoda {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

TEST(Half, F16RoundsToNearestEvenWithTheEdgesWorkedByHand) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f), 0x3c00);             // tie between 1 and 1 + 2^-10: even
  EXPECT_EQ(f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);         // tie between odd and even: up
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);  // past the tie: up
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);                    // the largest finite
  EXPECT_EQ(f32_to_f16(65519.99f), 0x7bff);                   // below the halfway point to 2^16
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);                    // the tie rounds to even: infinity
  EXPECT_EQ(f32_to_f16(-1e30f), 0xfc00);
  EXPECT_EQ(f32_to_f16(0x1p-24f), 0x0001);             // the smallest subnormal
  EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000);             // half of it: tie to even (zero)
  EXPECT_EQ(f32_to_f16(3 * 0x1p-25f), 0x0002);         // 1.5 subnormal units: tie to 2
  EXPECT_EQ(f32_to_f16(0x1p-14f - 0x1p-25f), 0x0400);  // rounds up into the normals
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::infinity()), 0x7c00);
  // NaN: quiet, sign and the top of the payload kept (x86 vcvtps2ph).
  EXPECT_EQ(f32_to_f16(from_bits(0x7f800001u)), 0x7e00);
  EXPECT_EQ(f32_to_f16(from_bits(0xffc02000u)), 0xfe01);
}

TEST(Half, Bf16RoundsToNearestEvenWithTheEdgesWorkedByHand) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);          // tie: even
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);      // tie: up to even
  EXPECT_EQ(f32_to_bf16(from_bits(0x7f7fffffu)), 0x7f80);  // the largest fp32 overflows
  EXPECT_EQ(f32_to_bf16(from_bits(0x00018000u)), 0x0002);  // subnormals round too
  EXPECT_EQ(f32_to_bf16(from_bits(0xff800001u)), 0xffc0);  // NaN stays NaN, made quiet
}

TEST(Half, EveryValueSurvivesTheTripThroughFp32) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const auto bits = static_cast<uint16_t>(h);
    const float f16 = f16_to_f32(bits), bf16 = bf16_to_f32(bits);
    if (std::isnan(f16)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f16)))) << h;
    } else {
      ASSERT_EQ(f32_to_f16(f16), bits) << h;
    }
    if (std::isnan(bf16)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(bf16)))) << h;
    } else {
      ASSERT_EQ(f32_to_bf16(bf16), bits) << h;
    }
  }
}

}  // namespace
}  // namespace pagoda
