// Internal to the kernels room: the kernel variants that dispatch.cpp chooses from. Each
// architecture lists its variants in one file (x86/variants.cpp, arm/variants.cpp): a name,
// a priority, the CPU features it needs and a builder. A builder is only called after its
// predicate held on this CPU, so an ISA file's instructions never run where they would fault.
// A new ISA is one file with its builder plus one entry in its architecture's list.
#pragma once

#include <span>

#include "kernels/kernels.h"
#include "util/cpu_features.h"

namespace pagoda::detail {

struct KernelVariant {
  const char* name;  // what --isa / PAGODA_ISA take
  int priority;      // among those the CPU supports, the highest is the default
  bool (*supported)(const CpuFeatures& cpu);
  const KernelTable& (*build)(const CpuFeatures& cpu);
};

// This architecture's variants (scalar excluded: dispatch.cpp always offers it).
std::span<const KernelVariant> architecture_variants();

const KernelTable& scalar_table();

#if defined(__x86_64__)  // the ISA files compile exactly then (tests call avx512_table too)
const KernelTable& avx2_table();
// use_bf16_dot: bf16 weights use vdpbf16ps (activations rounded to bf16); otherwise they are
// widened to fp32 with shifts and multiplied with fp32 FMA. use_vnni: the W8A8 / W4A8 matmul
// uses vpdpbusd (AVX512_VNNI) instead of vpmaddubsw + vpmaddwd.
const KernelTable& avx512_table(bool use_bf16_dot, bool use_vnni);
// avx512_table(true, false) with vdpbf16ps and vcvtneps2bf16 emulated in AVX-512F (see
// avx512.cpp): for tests of the bf16 kernel on CPUs without AVX512_BF16; never dispatched.
const KernelTable& avx512_table_emulating_bf16_dot();
#endif

#if defined(__aarch64__)
// Plain Armv8.0-A Advanced SIMD (every AArch64 CPU): fp32 FMA, fp16 widened by fcvtl, W8A8
// on smull/sadalp.
const KernelTable& neon_table();
// Armv8.2-A with the dot product and fp16 arithmetic (Kunpeng 920's TaiShan v110, Neoverse
// N1, Cortex-A76 and later): W8A8 / W4A8 on sdot.
const KernelTable& neon_dotprod_table();
// neon_dotprod plus the int8 matrix multiply (smmla, FEAT_I8MM) for W8A8 / W4A8 with many
// tokens.
const KernelTable& neon_i8mm_table();
// neon_i8mm plus bfdot for bf16 weights (activations rounded to bf16).
const KernelTable& neon_bf16_table();
// SVE with a vector above 128 bits: W8A8 / W4A8 on svdot, a tile's rows in the lanes; every
// other entry is the table of the best NEON variant this CPU runs (neon_bf16, neon_i8mm,
// neon_dotprod or neon).
const KernelTable& sve_table(const CpuFeatures& cpu);
#endif

}  // namespace pagoda::detail
