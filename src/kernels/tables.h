// Internal to the kernels room: the per-ISA table builders that dispatch.cpp chooses from.
// Each ISA file defines one builder; it is only called after cpu_features() said the CPU can
// run that file's instructions.
#pragma once

#include "kernels/kernels.h"

namespace pagoda::detail {

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

}  // namespace pagoda::detail
