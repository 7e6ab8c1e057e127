// Armv8.2-A NEON kernels with the dot product (sdot), for Kunpeng 920's TaiShan v110,
// Neoverse N1 / Graviton 2, Cortex-A76 and later: the shared SIMD templates as in neon.cpp,
// W8A8 / W4A8 with sdot (16 int8 products into 4 int32 lanes in one instruction), and f16
// weights and fp16 KV-cache scores in fp16 arithmetic (arm/fp16_kernels.h). Compiled with
// -march=armv8.2-a+dotprod+fp16 (src/kernels/CMakeLists.txt) and only chosen where the CPU
// reports asimddp, fphp and asimdhp (arm/variants.cpp).
#if defined(__aarch64__)

#include <arm_neon.h>

#include "kernels/arm/arm_table.h"
#include "kernels/arm/fp16_kernels.h"
#include "kernels/arm/int8_kernels.h"
#include "kernels/arm/int8_panels.h"
#include "kernels/arm/neon_traits.h"
#include "kernels/simd/quant_kernels.h"
#include "kernels/simd/simd_kernels.h"
#include "kernels/tables.h"

namespace pagoda::detail {
namespace {

struct NeonDotprod : NeonBase {
  // int8 and int4 read as 4 x 4 lane panels packed at load (arm/int8_panels.h).
  static constexpr int kInt8PanelRowBytes = arm::kSdotPanelRowBytes;
  static int32x4_t dot16(int32x4_t acc, int8x16_t a, int8x16_t b) { return vdotq_s32(acc, a, b); }
};

}  // namespace

const KernelTable& neon_dotprod_table() {
  static const KernelTable table = [] {
    KernelTable t =
        arm::with_f16_arithmetic<NeonDotprod>(arm::make_table<NeonDotprod>("neon_dotprod"));
    t.int8_lane_panels = arm::int8_panel_layout<NeonDotprod>();
    t.int4_lane_panels = arm::int8_panel_layout<NeonDotprod>();  // arm/int4_panels.h
    return t;
  }();
  return table;
}

}  // namespace pagoda::detail

#endif  // __aarch64__
