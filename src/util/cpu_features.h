// What the CPU we run on can do, read once from CPUID (x86) or the auxiliary vector (ARM).
// Kernels are chosen from this at start-up; nothing assumes an ISA at compile time.
#pragma once

#include <string>

namespace pagoda {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512_vnni = false;
  bool avx512_bf16 = false;
  // AArch64, from the HWCAP / HWCAP2 auxiliary vector entries (Linux's /proc/cpuinfo names):
  // asimd = NEON; asimddp = sdot/udot; fphp / asimdhp = fp16 scalar / vector arithmetic;
  // asimdfhm = fmlal (fp16 products into fp32); i8mm = smmla; bf16 = bfdot/bfmmla;
  // svebf16 = SVE's bfdot / bfmmla (z registers).
  bool asimd = false;
  bool asimddp = false;
  bool fphp = false;
  bool asimdhp = false;
  bool asimdfhm = false;
  bool i8mm = false;
  bool bf16 = false;
  bool sve = false;
  bool sve2 = false;
  bool svebf16 = false;
  int sve_vector_bytes = 0;  // the SVE vector length in use (prctl), 0 without SVE

  bool has_avx2_set() const { return avx2 && fma && f16c; }
  bool has_avx512_set() const {
    return has_avx2_set() && avx512f && avx512bw && avx512vl && avx512dq;
  }
  bool has_fp16_arith() const { return fphp && asimdhp; }
  std::string describe() const;  // e.g. "avx2 fma f16c avx512f ..." or "asimd asimddp ..."
};

// Detected once, on first use; thread-safe.
const CpuFeatures& cpu_features();

}  // namespace pagoda
