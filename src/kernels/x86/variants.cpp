// The x86-64 kernel variants, best first (see tables.h): AVX-512 needs F/BW/VL/DQ and picks
// its bf16 (vdpbf16ps) and VNNI (vpdpbusd) matmuls from the features it finds.
#if defined(__x86_64__)

#include "kernels/tables.h"

namespace pagoda::detail {

std::span<const KernelVariant> architecture_variants() {
  static constexpr KernelVariant kVariants[] = {
      {"avx512", 20, [](const CpuFeatures& cpu) { return cpu.has_avx512_set(); },
       [](const CpuFeatures& cpu) -> const KernelTable& {
         return avx512_table(cpu.avx512_bf16, cpu.avx512_vnni);
       }},
      {"avx2", 10, [](const CpuFeatures& cpu) { return cpu.has_avx2_set(); },
       [](const CpuFeatures&) -> const KernelTable& { return avx2_table(); }},
  };
  return kVariants;
}

}  // namespace pagoda::detail

#endif  // __x86_64__
