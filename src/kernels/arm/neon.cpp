// Plain Armv8.0-A NEON kernels, for every AArch64 CPU: the shared SIMD templates on 4 fp32
// lanes (arm/neon_traits.h), and W8A8 / W4A8 with the integer products widened by smull /
// smlal and summed in pairs by sadalp. Compiled with -march=armv8-a
// (src/kernels/CMakeLists.txt).
#if defined(__aarch64__)

#include <arm_neon.h>

#include "kernels/arm/arm_table.h"
#include "kernels/arm/int8_kernels.h"
#include "kernels/arm/neon_traits.h"
#include "kernels/simd/quant_kernels.h"
#include "kernels/simd/simd_kernels.h"
#include "kernels/tables.h"

namespace pagoda::detail {
namespace {

struct Neon : NeonBase {
  // acc + the 16 products a[i] * b[i], summed in fours (see arm/int8_kernels.h). Each int16
  // lane holds two products: |a * b| <= 128 * 127 (activations never reach -128), so the sum
  // of two is at most 32512 and cannot overflow.
  static int32x4_t dot16(int32x4_t acc, int8x16_t a, int8x16_t b) {
    int16x8_t p = vmull_s8(vget_low_s8(a), vget_low_s8(b));
    p = vmlal_s8(p, vget_high_s8(a), vget_high_s8(b));
    return vpadalq_s16(acc, p);
  }
};

}  // namespace

const KernelTable& neon_table() {
  static const KernelTable table = arm::make_table<Neon>("neon");
  return table;
}

}  // namespace pagoda::detail

#endif  // __aarch64__
