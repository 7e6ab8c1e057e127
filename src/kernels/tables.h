// Internal to the kernels room: the per-ISA table builders that dispatch.cpp chooses from.
// Each ISA file defines one builder; it is only called after cpu_features() said the CPU can
// run that file's instructions.
#pragma once

#include "kernels/kernels.h"

namespace pagoda::detail {

const KernelTable& scalar_table();
#if defined(PAGODA_KERNELS_X86)
const KernelTable& avx2_table();
// use_bf16_dot: bf16 weights use vdpbf16ps (activations rounded to bf16); otherwise they are
// widened to fp32 with shifts and multiplied with fp32 FMA.
const KernelTable& avx512_table(bool use_bf16_dot);
#endif

}  // namespace pagoda::detail
