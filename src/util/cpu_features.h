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
  bool neon = false;

  bool has_avx2_set() const { return avx2 && fma && f16c; }
  bool has_avx512_set() const {
    return has_avx2_set() && avx512f && avx512bw && avx512vl && avx512dq;
  }
  std::string describe() const;  // e.g. "avx2 fma f16c avx512f ..."
};

// Detected once, on first use; thread-safe.
const CpuFeatures& cpu_features();

}  // namespace pagoda
