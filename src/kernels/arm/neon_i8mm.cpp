// Armv8.2-A NEON kernels with the dot product, fp16 arithmetic and the int8 matrix multiply
// (smmla, FEAT_I8MM: Neoverse N2 / V1, Graviton 3, newer HiSilicon cores): neon_dotprod's
// table, with W8A8 / W4A8 prefill and batched decode on smmla tiles (arm/i8mm_kernels.h);
// decode keeps sdot. Compiled with -march=armv8.2-a+dotprod+fp16+i8mm
// (src/kernels/CMakeLists.txt) and only chosen where the CPU also reports i8mm
// (arm/variants.cpp), which Kunpeng 920 does not.
#if defined(__aarch64__)

#include <arm_neon.h>

#include "kernels/arm/arm_table.h"
#include "kernels/arm/fp16_kernels.h"
#include "kernels/arm/i8mm_kernels.h"
#include "kernels/arm/int8_kernels.h"
#include "kernels/arm/int8_panels.h"
#include "kernels/arm/neon_traits.h"
#include "kernels/simd/quant_kernels.h"
#include "kernels/simd/simd_kernels.h"
#include "kernels/tables.h"

namespace pagoda::detail {
namespace {

struct NeonI8mm : NeonBase {
  // smmla tiles of 4 rows x 8 tokens (4 token pairs) for many tokens (see i8mm_kernels.h).
  static constexpr int kIntTileTokens = 8;
  static constexpr bool kMatrixMultiply = true;
  // int8 and int4 read as 4 x 8 lane panels packed at load, decode included
  // (arm/int8_panels.h).
  static constexpr int kInt8PanelRowBytes = arm::kMmlaPanelRowBytes;
  static int32x4_t dot16(int32x4_t acc, int8x16_t a, int8x16_t b) { return vdotq_s32(acc, a, b); }
};

}  // namespace

const KernelTable& neon_i8mm_table() {
  static const KernelTable table = [] {
    KernelTable t = arm::with_f16_arithmetic<NeonI8mm>(arm::make_table<NeonI8mm>("neon_i8mm"));
    t.int8_lane_panels = arm::int8_panel_layout<NeonI8mm>();
    t.int4_lane_panels = arm::int8_panel_layout<NeonI8mm>();  // arm/int4_panels.h
    return t;
  }();
  return table;
}

}  // namespace pagoda::detail

#endif  // __aarch64__
