// SVE kernels where a vector longer than NEON's 128 bits pays: W8A8 / W4A8 on svdot
// (arm/sve_int8_kernels.h), a tile's rows in the vector's lanes, so that one instruction does
// 32 multiply-adds at 256 bits (Neoverse V1 / Graviton 3) and 64 at 512 (A64FX). Every other
// entry is the table of the NEON variant this CPU would otherwise run (neon_bf16, neon_i8mm,
// neon_dotprod, or plain neon on A64FX, which has SVE but not NEON's dot product): the f32,
// f16 and bf16 matmuls, attention and the rest are NEON's at any vector length (widening them
// is open: docs/kernels.md). Compiled with -march=armv8.2-a+sve (src/kernels/CMakeLists.txt:
// svdot is SVE's own, so no +dotprod) and only chosen where the CPU reports SVE with a vector
// above 128 bits (arm/variants.cpp).
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

// Whether the SVE tiles take this int8-activation matmul. Decode (fewer than
// arm::kIntManyTokens tokens) always: per 32 weights of a block the svdot tile issues 13.0
// instructions at 256 bits against the sdot tile's 17.0 (bench/peers/aarch64_inner_loops.py).
// Many tokens on a CPU with smmla only where svdot does more than smmla's 32 multiply-adds, i.e.
// above 256 bits: at 256 both do 32 per instruction, and the smmla tile needs fewer
// instructions around them (5.5 per 32 MACs against 7.4 for the svdot tile).
template <bool kNeonHasSmmla>
bool takes_svdot_tiles(int64_t num_tokens) {
  if (num_tokens < arm::kIntManyTokens || !kNeonHasSmmla) return true;
  return svcntb() * 8 > 256;
}

// int8-activation matmuls on kI8 / kI4 in row-major storage take the SVE tiles (as above);
// everything else (fp32, f16, bf16 weights, weight-only int8 / int4, lane panels) the NEON
// table's matmul.
template <const KernelTable& (*kNeon)(), bool kNeonHasSmmla>
void matmul(const float* x, int64_t num_tokens, const WeightView& w, int64_t row_begin,
            int64_t row_end, float* y, int64_t ldy) {
  if (w.int8_activations && w.lane_panels == nullptr &&
      takes_svdot_tiles<kNeonHasSmmla>(num_tokens)) {
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

template <const KernelTable& (*kNeon)(), bool kNeonHasSmmla>
const KernelTable& sve_over() {
  static const KernelTable table = [] {
    KernelTable t = kNeon();
    t.isa = "sve";
    t.matmul = matmul<kNeon, kNeonHasSmmla>;
    // int8_lane_panels stays the NEON table's: weights the loader packs run the NEON panel tiles
    // (at 256 bits 8.2 instructions per 32 Q8_0 weights in decode against the row-major svdot
    // tile's 13.0), row-major ones (int4, GGUF Q8_0 held in memory) the svdot tiles.
    return t;
  }();
  return table;
}

}  // namespace

const KernelTable& sve_table(const CpuFeatures& cpu) {
  // The NEON variants' own predicates (arm/variants.cpp), best first.
  const bool dotprod = cpu.asimddp && cpu.has_fp16_arith();
  if (dotprod && cpu.i8mm && cpu.bf16) return sve_over<neon_bf16_table, true>();
  if (dotprod && cpu.i8mm) return sve_over<neon_i8mm_table, true>();
  if (dotprod) return sve_over<neon_dotprod_table, false>();
  return sve_over<neon_table, false>();
}

}  // namespace pagoda::detail

#endif  // __aarch64__
