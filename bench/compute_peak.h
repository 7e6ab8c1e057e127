// The compute roofline probe for the prefill figures, as kernels/bandwidth.h is for decode: how
// many int8 multiply-adds (the instructions the W8A8 / W4A8 kernels use: vpdpbusd with
// AVX512_VNNI, else vpmaddubsw + vpmaddwd + vpaddd) and fp32 FMAs this machine's cores retire
// per second. Twelve independent register chains per thread, written in assembly so that only
// the execution ports limit them (through intrinsics GCC adds register copies; see the panel
// tile in src/kernels/x86/avx512.cpp). Header-only: each .cpp in bench/ is a benchmark.
#pragma once

#include <omp.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "util/cpu_features.h"

namespace pagoda::bench {

struct ComputePeak {
  double int8_gops = 0.0;    // 2 ops per int8 multiply-add
  double fp32_gflops = 0.0;  // 2 flops per FMA lane
  // The same per CPU-second of the process: on a shared machine the scheduler's time slices
  // count in wall time and not here, so kernel and peak per CPU-second compare fairly.
  double int8_gops_per_cpu = 0.0;
  double fp32_gflops_per_cpu = 0.0;
  const char* int8_instructions = "not measured";
  const char* fp32_instructions = "not measured";
};

#if defined(__x86_64__)
namespace peak_detail {

// One loop of each probe: 12 instructions, or 4 chains x 3 for the two-step int8 dot (products
// into zmm4-7, widened by vpmaddwd with zmm9, added into zmm0-3). Every register starts at
// zero, so no FMA meets a denormal; the values are never read back.
// vpxor on an xmm register clears the whole zmm.
#define PAGODA_ZERO_REGISTERS                                              \
  "vpxor %%xmm0, %%xmm0, %%xmm0\n\tvpxor %%xmm1, %%xmm1, %%xmm1\n\t"       \
  "vpxor %%xmm2, %%xmm2, %%xmm2\n\tvpxor %%xmm3, %%xmm3, %%xmm3\n\t"       \
  "vpxor %%xmm4, %%xmm4, %%xmm4\n\tvpxor %%xmm5, %%xmm5, %%xmm5\n\t"       \
  "vpxor %%xmm6, %%xmm6, %%xmm6\n\tvpxor %%xmm7, %%xmm7, %%xmm7\n\t"       \
  "vpxor %%xmm8, %%xmm8, %%xmm8\n\tvpxor %%xmm9, %%xmm9, %%xmm9\n\t"       \
  "vpxor %%xmm10, %%xmm10, %%xmm10\n\tvpxor %%xmm11, %%xmm11, %%xmm11\n\t" \
  "vpxor %%xmm14, %%xmm14, %%xmm14\n\tvpxor %%xmm15, %%xmm15, %%xmm15\n\t"
#define PAGODA_PEAK_LOOP(body)                                                                   \
  asm volatile(PAGODA_ZERO_REGISTERS "1:\n\t" body "dec %0\n\tjnz 1b\n\tvzeroupper"              \
               : "+r"(iterations)                                                                \
               :                                                                                 \
               : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", \
                 "xmm10", "xmm11", "xmm14", "xmm15", "cc")
inline void vpdpbusd_zmm(int64_t iterations) {
  PAGODA_PEAK_LOOP(
      "vpdpbusd %%zmm14, %%zmm15, %%zmm0\n\tvpdpbusd %%zmm14, %%zmm15, %%zmm1\n\t"
      "vpdpbusd %%zmm14, %%zmm15, %%zmm2\n\tvpdpbusd %%zmm14, %%zmm15, %%zmm3\n\t"
      "vpdpbusd %%zmm14, %%zmm15, %%zmm4\n\tvpdpbusd %%zmm14, %%zmm15, %%zmm5\n\t"
      "vpdpbusd %%zmm14, %%zmm15, %%zmm6\n\tvpdpbusd %%zmm14, %%zmm15, %%zmm7\n\t"
      "vpdpbusd %%zmm14, %%zmm15, %%zmm8\n\tvpdpbusd %%zmm14, %%zmm15, %%zmm9\n\t"
      "vpdpbusd %%zmm14, %%zmm15, %%zmm10\n\tvpdpbusd %%zmm14, %%zmm15, %%zmm11\n\t");
}
inline void maddubs_zmm(int64_t iterations) {
  PAGODA_PEAK_LOOP(
      "vpmaddubsw %%zmm14, %%zmm15, %%zmm4\n\tvpmaddubsw %%zmm14, %%zmm15, %%zmm5\n\t"
      "vpmaddubsw %%zmm14, %%zmm15, %%zmm6\n\tvpmaddubsw %%zmm14, %%zmm15, %%zmm7\n\t"
      "vpmaddwd %%zmm9, %%zmm4, %%zmm4\n\tvpmaddwd %%zmm9, %%zmm5, %%zmm5\n\t"
      "vpmaddwd %%zmm9, %%zmm6, %%zmm6\n\tvpmaddwd %%zmm9, %%zmm7, %%zmm7\n\t"
      "vpaddd %%zmm4, %%zmm0, %%zmm0\n\tvpaddd %%zmm5, %%zmm1, %%zmm1\n\t"
      "vpaddd %%zmm6, %%zmm2, %%zmm2\n\tvpaddd %%zmm7, %%zmm3, %%zmm3\n\t");
}
inline void maddubs_ymm(int64_t iterations) {
  PAGODA_PEAK_LOOP(
      "vpmaddubsw %%ymm14, %%ymm15, %%ymm4\n\tvpmaddubsw %%ymm14, %%ymm15, %%ymm5\n\t"
      "vpmaddubsw %%ymm14, %%ymm15, %%ymm6\n\tvpmaddubsw %%ymm14, %%ymm15, %%ymm7\n\t"
      "vpmaddwd %%ymm9, %%ymm4, %%ymm4\n\tvpmaddwd %%ymm9, %%ymm5, %%ymm5\n\t"
      "vpmaddwd %%ymm9, %%ymm6, %%ymm6\n\tvpmaddwd %%ymm9, %%ymm7, %%ymm7\n\t"
      "vpaddd %%ymm4, %%ymm0, %%ymm0\n\tvpaddd %%ymm5, %%ymm1, %%ymm1\n\t"
      "vpaddd %%ymm6, %%ymm2, %%ymm2\n\tvpaddd %%ymm7, %%ymm3, %%ymm3\n\t");
}
inline void fma_zmm(int64_t iterations) {
  PAGODA_PEAK_LOOP(
      "vfmadd231ps %%zmm14, %%zmm15, %%zmm0\n\tvfmadd231ps %%zmm14, %%zmm15, %%zmm1\n\t"
      "vfmadd231ps %%zmm14, %%zmm15, %%zmm2\n\tvfmadd231ps %%zmm14, %%zmm15, %%zmm3\n\t"
      "vfmadd231ps %%zmm14, %%zmm15, %%zmm4\n\tvfmadd231ps %%zmm14, %%zmm15, %%zmm5\n\t"
      "vfmadd231ps %%zmm14, %%zmm15, %%zmm6\n\tvfmadd231ps %%zmm14, %%zmm15, %%zmm7\n\t"
      "vfmadd231ps %%zmm14, %%zmm15, %%zmm8\n\tvfmadd231ps %%zmm14, %%zmm15, %%zmm9\n\t"
      "vfmadd231ps %%zmm14, %%zmm15, %%zmm10\n\tvfmadd231ps %%zmm14, %%zmm15, %%zmm11\n\t");
}
inline void fma_ymm(int64_t iterations) {
  PAGODA_PEAK_LOOP(
      "vfmadd231ps %%ymm14, %%ymm15, %%ymm0\n\tvfmadd231ps %%ymm14, %%ymm15, %%ymm1\n\t"
      "vfmadd231ps %%ymm14, %%ymm15, %%ymm2\n\tvfmadd231ps %%ymm14, %%ymm15, %%ymm3\n\t"
      "vfmadd231ps %%ymm14, %%ymm15, %%ymm4\n\tvfmadd231ps %%ymm14, %%ymm15, %%ymm5\n\t"
      "vfmadd231ps %%ymm14, %%ymm15, %%ymm6\n\tvfmadd231ps %%ymm14, %%ymm15, %%ymm7\n\t"
      "vfmadd231ps %%ymm14, %%ymm15, %%ymm8\n\tvfmadd231ps %%ymm14, %%ymm15, %%ymm9\n\t"
      "vfmadd231ps %%ymm14, %%ymm15, %%ymm10\n\tvfmadd231ps %%ymm14, %%ymm15, %%ymm11\n\t");
}
#undef PAGODA_PEAK_LOOP
#undef PAGODA_ZERO_REGISTERS

inline double process_cpu_seconds_now() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Operations per second of `loop` on `threads` threads at once (ops_per_iteration per thread
// and loop), best of a few runs: other load on the machine only slows a run down. Per wall
// second, and in *per_cpu_second per CPU-second of the process.
inline double ops_per_second(void (*loop)(int64_t), double ops_per_iteration, int threads,
                             double* per_cpu_second) {
  constexpr int64_t kIterations = int64_t{1} << 22;  // ~10-20 ms per run at these rates
  const double ops = ops_per_iteration * static_cast<double>(kIterations) * threads;
  double best = 0.0;
  *per_cpu_second = 0.0;
  for (int run = 0; run < 4; ++run) {
    const double cpu0 = process_cpu_seconds_now();
    const auto start = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
    loop(kIterations);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, ops / seconds);
    *per_cpu_second = std::max(*per_cpu_second, ops / (process_cpu_seconds_now() - cpu0));
  }
  return best;
}

}  // namespace peak_detail
#endif

// The peaks of the widest instructions this CPU has (run on `threads` threads at once), or of
// the 256-bit ones with ymm_only (what the avx2 table runs, also on an AVX-512 CPU).
inline ComputePeak measure_compute_peak(int threads, bool ymm_only = false) {
  ComputePeak peak;
#if defined(__x86_64__)
  using namespace peak_detail;
  const CpuFeatures& cpu = cpu_features();
  // 12 instructions x 64 multiply-adds (zmm) x 2 ops; the two-step dot: 4 chains x 64 (zmm).
  const bool zmm = cpu.has_avx512_set() && !ymm_only;
  if (zmm && cpu.avx512_vnni) {
    peak.int8_gops =
        ops_per_second(vpdpbusd_zmm, 12 * 64 * 2, threads, &peak.int8_gops_per_cpu) / 1e9;
    peak.int8_instructions = "vpdpbusd zmm";
  } else if (zmm) {
    peak.int8_gops =
        ops_per_second(maddubs_zmm, 4 * 64 * 2, threads, &peak.int8_gops_per_cpu) / 1e9;
    peak.int8_instructions = "vpmaddubsw+vpmaddwd+vpaddd zmm";
  } else if (cpu.has_avx2_set()) {
    peak.int8_gops =
        ops_per_second(maddubs_ymm, 4 * 32 * 2, threads, &peak.int8_gops_per_cpu) / 1e9;
    peak.int8_instructions = "vpmaddubsw+vpmaddwd+vpaddd ymm";
  }
  if (zmm) {
    peak.fp32_gflops =
        ops_per_second(fma_zmm, 12 * 16 * 2, threads, &peak.fp32_gflops_per_cpu) / 1e9;
    peak.fp32_instructions = "vfmadd231ps zmm";
  } else if (cpu.has_avx2_set()) {
    peak.fp32_gflops =
        ops_per_second(fma_ymm, 12 * 8 * 2, threads, &peak.fp32_gflops_per_cpu) / 1e9;
    peak.fp32_instructions = "vfmadd231ps ymm";
  }
  peak.int8_gops_per_cpu /= 1e9;
  peak.fp32_gflops_per_cpu /= 1e9;
#else
  (void)threads;
  (void)ymm_only;
#endif
  return peak;
}

}  // namespace pagoda::bench
