// SVE kernels where a vector longer than NEON's 128 bits pays, vector-length agnostic (each
// reads svcntw() / svcntd() at run time):
//   * W8A8 / W4A8 on svdot (arm/sve_int8_kernels.h), a tile's rows in the vector's lanes, so
//     that one instruction does 32 multiply-adds at 256 bits (Neoverse V1 / Graviton 3) and 64
//     at 512 (A64FX);
//   * f32 weights, and f16 / bf16 weights where the NEON table widens them (A64FX's plain
//     neon), on fp32 fmla tiles of 4 rows x 1-6 tokens along the vector
//     (arm/sve_float_kernels.h); bf16 weights on SVE's bfdot where the CPU reports svebf16
//     (arm/sve_bf16_kernels.h);
//   * dot, dot_rows and attention_scores (the q.k scores of decode, MLA and the prefill tiles)
//     and axpy_rows / attention_values (the value sums of decode and of the prefill tiles) over
//     an f32 / bf16 cache, and an fp16 cache where the NEON table has no fp16 arithmetic
//     (arm/sve_float_kernels.h).
// Every other entry is the table of the NEON variant this CPU would otherwise run (neon_bf16,
// neon_i8mm, neon_dotprod, or plain neon on A64FX, which has SVE but not NEON's dot product):
// f16 weights and an fp16 cache in NEON's fp16 arithmetic (8 multiply-adds per fmla on the
// stored values, which the widening SVE loop needs 256 bits and more instructions to match),
// bf16 on NEON's bfdot / bfmmla where SVE's bfdot is missing, the int8 and int4 lane panels,
// axpy and the element-wise entries. The instruction counts behind each choice:
// bench/peers/aarch64_inner_loops.py, docs/kernels.md. Compiled with
// -march=armv8.2-a+sve+bf16 (src/kernels/CMakeLists.txt: svdot is SVE's own, so no +dotprod;
// +bf16 for svbfdot, reached only with svebf16) and only chosen where the CPU reports SVE with a
// vector above 128 bits (arm/variants.cpp).
//
// No standard-library code here: GCC vectorises with SVE in this file, and an inline function
// compiled here could be the copy the linker keeps for every file (the ODR rules of
// simd/simd_kernels.h), so everything here is a template on this file's own traits or a
// function no other file defines.
#if defined(__aarch64__)

#include <arm_sve.h>

#include "kernels/arm/neon_traits.h"
#include "kernels/arm/sve_bf16_kernels.h"
#include "kernels/arm/sve_float_kernels.h"
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

// Whether the widening SVE float tiles (arm/sve_float_kernels.h) take a matmul on these
// weights: f32 always (4 multiply-adds per NEON fmla against svcntw() per SVE fmla); f16 and
// bf16 only where the NEON table widens them to fp32 too (plain neon: A64FX). The NEON fp16
// arithmetic (arm/fp16_kernels.h) does 8 multiply-adds per fmla on the stored values, which the
// widening loop matches at 256 bits with more instructions around them; NEON's bfdot / bfmmla
// (arm/bf16_kernels.h) likewise, and where the CPU has SVE's bfdot, bf16 takes that instead
// (bench/peers/aarch64_inner_loops.py, docs/kernels.md).
template <const KernelTable& (*kNeon)()>
bool takes_sve_widening(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return true;
    case DType::kF16:
      return !kNeon().f16_arithmetic;
    case DType::kBF16:
      return !kNeon().matmul_bf16_activations;
    default:
      return false;
  }
}

// int8-activation matmuls on kI8 / kI4 in row-major storage take the SVE tiles (as above);
// bf16 weights SVE's bfdot where the CPU has it (kSveBf16); f32, f16 and bf16 the widening SVE
// tiles where takes_sve_widening says so; everything else (weight-only int8 / int4, lane
// panels, and the 16-bit weights the NEON table multiplies as stored) the NEON table's matmul.
template <const KernelTable& (*kNeon)(), bool kNeonHasSmmla, bool kSveBf16>
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
  if (kSveBf16 && w.dtype == DType::kBF16) {
    arm::sve::matmul_bf16_dot<Sve>(x, num_tokens, w, row_begin, row_end, y, ldy);
    return;
  }
  if (takes_sve_widening<kNeon>(w.dtype)) {
    arm::sve::matmul<Sve>(x, num_tokens, w, row_begin, row_end, y, ldy);
    return;
  }
  kNeon().matmul(x, num_tokens, w, row_begin, row_end, y, ldy);
}

// The scores and value sums over a KV cache block: SVE on every cache dtype but an fp16 cache
// of a NEON table with fp16 arithmetic, which keeps its fp16 products (8 per fmla, as many as
// a 256-bit fp32 fmla, without the widening).
template <const KernelTable& (*kNeon)()>
bool neon_keeps_cache(DType rows_dtype) {
  return rows_dtype == DType::kF16 && kNeon().f16_arithmetic;
}

template <const KernelTable& (*kNeon)()>
void dot_rows(const float* a, const void* rows, DType rows_dtype, int64_t row_stride,
              int64_t num_rows, int64_t n, float* out) {
  if (neon_keeps_cache<kNeon>(rows_dtype)) {
    kNeon().dot_rows(a, rows, rows_dtype, row_stride, num_rows, n, out);
    return;
  }
  arm::sve::dot_rows<Sve>(a, rows, rows_dtype, row_stride, num_rows, n, out);
}

template <const KernelTable& (*kNeon)()>
void attention_scores(const float* q, int64_t ldq, int64_t num_q, const void* rows,
                      DType rows_dtype, int64_t row_stride, int64_t num_rows, int64_t n, float* s,
                      int64_t lds) {
  if (neon_keeps_cache<kNeon>(rows_dtype)) {
    kNeon().attention_scores(q, ldq, num_q, rows, rows_dtype, row_stride, num_rows, n, s, lds);
    return;
  }
  arm::sve::attention_scores<Sve>(q, ldq, num_q, rows, rows_dtype, row_stride, num_rows, n, s, lds);
}

template <const KernelTable& (*kNeon)()>
void axpy_rows(const float* coeffs, const void* rows, DType rows_dtype, int64_t row_stride,
               int64_t num_rows, int64_t n, float* y) {
  if (neon_keeps_cache<kNeon>(rows_dtype)) {
    kNeon().axpy_rows(coeffs, rows, rows_dtype, row_stride, num_rows, n, y);
    return;
  }
  arm::sve::axpy_rows<Sve>(coeffs, rows, rows_dtype, row_stride, num_rows, n, y);
}

template <const KernelTable& (*kNeon)()>
void attention_values(const float* p, int64_t ldp, int64_t num_q, const float* row_scale,
                      const void* const* blocks, int64_t block_rows, DType rows_dtype,
                      int64_t row_stride, int64_t num_rows, int64_t n, float* acc, int64_t lda) {
  if (neon_keeps_cache<kNeon>(rows_dtype)) {
    kNeon().attention_values(p, ldp, num_q, row_scale, blocks, block_rows, rows_dtype, row_stride,
                             num_rows, n, acc, lda);
    return;
  }
  arm::sve::attention_values<Sve>(p, ldp, num_q, row_scale, blocks, block_rows, rows_dtype,
                                  row_stride, num_rows, n, acc, lda);
}

// kSveBf16: bf16 weights on SVE's bfdot (chosen over neon_bf16 only, which rounds x to bf16
// for its own bfdot already).
template <const KernelTable& (*kNeon)(), bool kNeonHasSmmla, bool kSveBf16 = false>
const KernelTable& sve_over() {
  static const KernelTable table = [] {
    KernelTable t = kNeon();
    t.isa = "sve";
    t.matmul = matmul<kNeon, kNeonHasSmmla, kSveBf16>;
    if constexpr (kSveBf16) t.matmul_bf16_activations = true;  // x meets bfdot as bf16
    // int8_lane_panels and int4_lane_panels stay the NEON table's: weights the loader packs run
    // the NEON panel tiles (per 32 weights in decode, Q8_0 8.2 instructions against the
    // row-major svdot tile's 13.0 at 256 bits, Q4_0 9.0 against 20.0 (10.0 at 512); Q4_0
    // prefill 5.9 on sdot panels, 3.9 on smmla ones, against 11.1), row-major ones (GGUF Q8_0 or
    // Q4 held in memory for the CPU device) the svdot tiles.
    // dot with dot_rows' chains (a score is the same bits either way); axpy and the
    // element-wise entries stay NEON's (a value sum's bits do not depend on the vector length,
    // so NEON's axpy gives axpy_rows' bits).
    t.dot = arm::sve::dot<Sve>;
    t.dot_rows = dot_rows<kNeon>;
    t.attention_scores = attention_scores<kNeon>;
    t.axpy_rows = axpy_rows<kNeon>;
    t.attention_values = attention_values<kNeon>;
    return t;
  }();
  return table;
}

}  // namespace

const KernelTable& sve_table(const CpuFeatures& cpu) {
  // The NEON variants' own predicates (arm/variants.cpp), best first.
  const bool dotprod = cpu.asimddp && cpu.has_fp16_arith();
  if (dotprod && cpu.i8mm && cpu.bf16) {
    // SVE's bfdot only where the CPU reports it (HWCAP2_SVEBF16), not on NEON's bf16 alone.
    if (cpu.svebf16) return sve_over<neon_bf16_table, true, true>();
    return sve_over<neon_bf16_table, true>();
  }
  if (dotprod && cpu.i8mm) return sve_over<neon_i8mm_table, true>();
  if (dotprod) return sve_over<neon_dotprod_table, false>();
  return sve_over<neon_table, false>();
}

}  // namespace pagoda::detail

#endif  // __aarch64__
