// SVE kernels where a vector longer than NEON's 128 bits pays: W8A8 / W4A8 on svdot
// (arm/sve_int8_kernels.h), a tile's rows in the vector's lanes, so that one instruction does
// 32 multiply-adds at 256 bits (Neoverse V1 / Graviton 3) and 64 at 512 (A64FX). Every other
// entry is the NEON table of the variant this CPU would otherwise run (neon_bf16, neon_i8mm or
// neon_dotprod, by its features): at any vector length NEON's entries are correct, and where
// they gain nothing from width (fp16 arithmetic, bf16, attention) they stay. Compiled with
// -march=armv8.2-a+dotprod+fp16+sve (src/kernels/CMakeLists.txt) and only chosen where the CPU
// reports SVE with a vector above 128 bits (arm/variants.cpp).
//
// Only the integer matmul lives here, and no standard-library code: GCC vectorises with SVE in
// this file, and an inline function compiled here could be the copy the linker keeps for every
// file (the ODR rules of simd/simd_kernels.h), so everything here is a template on this file's
// own traits or a function no other file defines.
#if defined(__aarch64__)

#include <arm_sve.h>

#include "kernels/arm/neon_traits.h"
#include "kernels/arm/sve_int8_kernels.h"
#include "kernels/tables.h"

namespace pagoda::detail {
namespace {

// The traits quantize_activations is instantiated on: its scratch and reuse key are this
// file's own (arm/int8_kernels.h).
struct Sve : NeonBase {};

// int8-activation matmuls on kI8 / kI4 in row-major storage take the SVE tiles; everything
// else (fp32, f16, bf16 weights, weight-only int8 / int4, lane panels) the NEON table's matmul.
template <const KernelTable& (*kNeon)()>
void matmul(const float* x, int64_t num_tokens, const WeightView& w, int64_t row_begin,
            int64_t row_end, float* y, int64_t ldy) {
  if (w.int8_activations && w.lane_panels == nullptr) {
    if (w.dtype == DType::kI8) {
      arm::sve::matmul_int8_activations<Sve, DType::kI8>(x, num_tokens, w, row_begin, row_end, y,
                                                         ldy);
      return;
    }
    if (w.dtype == DType::kI4) {
      arm::sve::matmul_int8_activations<Sve, DType::kI4>(x, num_tokens, w, row_begin, row_end, y,
                                                         ldy);
      return;
    }
  }
  kNeon().matmul(x, num_tokens, w, row_begin, row_end, y, ldy);
}

template <const KernelTable& (*kNeon)()>
const KernelTable& sve_over() {
  static const KernelTable table = [] {
    KernelTable t = kNeon();
    t.isa = "sve";
    t.matmul = matmul<kNeon>;
    t.int8_lane_panels = false;  // the SVE tiles read kI8 row-major: the loader must not pack
    return t;
  }();
  return table;
}

}  // namespace

const KernelTable& sve_table(const CpuFeatures& cpu) {
  if (cpu.i8mm && cpu.bf16) return sve_over<neon_bf16_table>();
  if (cpu.i8mm) return sve_over<neon_i8mm_table>();
  return sve_over<neon_dotprod_table>();
}

}  // namespace pagoda::detail

#endif  // __aarch64__
