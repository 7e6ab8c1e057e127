// The AArch64 kernel variants, best first (see tables.h). Every AArch64 CPU has NEON; the dot
// product variant also needs fp16 arithmetic, since its file is compiled for Armv8.2-A with
// +fp16 (Kunpeng 920 reports asimd asimddp fphp asimdhp asimdfhm: it qualifies); the i8mm
// variant is that plus smmla (not on Kunpeng 920 or Neoverse N1).
//
// sve needs a vector above 128 bits, read at run time (prctl(PR_SVE_GET_VL), CpuFeatures):
// at 128 bits svdot does the 16 multiply-adds of NEON's sdot and an SVE fmla the 4 of NEON's,
// and the SVE tiles add gathers and a fold per block that the NEON ones do not, so a 128-bit
// SVE core (Neoverse N2, newer HiSilicon cores) keeps its NEON variant; at 256 bits (Neoverse
// V1, Graviton 3) one svdot does 32 and one fmla 8, at 512 (A64FX) 64 and 16. It takes the
// int8-activation matmul, the f32 matmul (f16 and bf16 where its NEON table widens them, bf16
// on SVE's bfdot where the CPU reports svebf16) and the KV-cache scores and value sums; its
// other entries are the best NEON variant's (arm/sve.cpp), plain neon on A64FX, which has SVE
// but not NEON's dot product.
#if defined(__aarch64__)

#include "kernels/tables.h"

namespace pagoda::detail {

std::span<const KernelVariant> architecture_variants() {
  static constexpr KernelVariant kVariants[] = {
      {"sve", 50,
       [](const CpuFeatures& cpu) { return cpu.asimd && cpu.sve && cpu.sve_vector_bytes > 16; },
       [](const CpuFeatures& cpu) -> const KernelTable& { return sve_table(cpu); }},
      {"neon_bf16", 40,
       [](const CpuFeatures& cpu) {
         return cpu.asimd && cpu.asimddp && cpu.has_fp16_arith() && cpu.i8mm && cpu.bf16;
       },
       [](const CpuFeatures&) -> const KernelTable& { return neon_bf16_table(); }},
      {"neon_i8mm", 30,
       [](const CpuFeatures& cpu) {
         return cpu.asimd && cpu.asimddp && cpu.has_fp16_arith() && cpu.i8mm;
       },
       [](const CpuFeatures&) -> const KernelTable& { return neon_i8mm_table(); }},
      {"neon_dotprod", 20,
       [](const CpuFeatures& cpu) { return cpu.asimd && cpu.asimddp && cpu.has_fp16_arith(); },
       [](const CpuFeatures&) -> const KernelTable& { return neon_dotprod_table(); }},
      {"neon", 10, [](const CpuFeatures& cpu) { return cpu.asimd; },
       [](const CpuFeatures&) -> const KernelTable& { return neon_table(); }},
  };
  return kVariants;
}

}  // namespace pagoda::detail

#endif  // __aarch64__
