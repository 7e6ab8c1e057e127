// neon_i8mm plus bf16 arithmetic (bfdot, FEAT_BF16: Neoverse V1 / N2, Graviton 3, newer
// HiSilicon cores): bf16 weights multiplied as stored, 8 pairs per instruction, with the
// activations rounded to bf16 (arm/bf16_kernels.h). Compiled with
// -march=armv8.2-a+dotprod+fp16+i8mm+bf16 (src/kernels/CMakeLists.txt) and only chosen where
// the CPU reports i8mm and bf16 too (arm/variants.cpp).
#if defined(__aarch64__)

#include <arm_neon.h>

#include "kernels/arm/arm_table.h"
#include "kernels/arm/bf16_mmla_kernels.h"
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

struct NeonBf16 : NeonBase {
  static constexpr int kIntTileTokens = 8;  // the smmla tiles of neon_i8mm
  static constexpr bool kMatrixMultiply = true;
  // int8 and int4 read as neon_i8mm reads them: 4 x 8 lane panels packed at load
  // (arm/int8_panels.h).
  static constexpr int kInt8PanelRowBytes = arm::kMmlaPanelRowBytes;
  static int32x4_t dot16(int32x4_t acc, int8x16_t a, int8x16_t b) { return vdotq_s32(acc, a, b); }
};

}  // namespace

const KernelTable& neon_bf16_table() {
  static const KernelTable table = [] {
    KernelTable t = arm::with_f16_arithmetic<NeonBf16>(arm::make_table<NeonBf16>("neon_bf16"));
    t.matmul = arm::matmul_bf16_dot<NeonBf16, &arm::matmul<NeonBf16>>;
    t.matmul_bf16_activations = true;
    t.int8_lane_panels = arm::int8_panel_layout<NeonBf16>();
    t.int4_lane_panels = arm::int8_panel_layout<NeonBf16>();  // arm/int4_panels.h
    return t;
  }();
  return table;
}

}  // namespace pagoda::detail

#endif  // __aarch64__
