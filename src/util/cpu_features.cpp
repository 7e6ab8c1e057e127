#include "util/cpu_features.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__aarch64__)
#include <sys/auxv.h>
#endif

namespace pagoda {
namespace {

#if defined(__x86_64__) || defined(__i386__)
// The OS must save the wide registers on context switch, or using them corrupts state:
// XCR0 tells which register files it saves.
uint64_t read_xcr0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  const bool osxsave = ecx & (1u << 27);
  const bool avx = ecx & (1u << 28);
  f.fma = ecx & (1u << 12);
  f.f16c = ecx & (1u << 29);
  if (!osxsave || !avx) return CpuFeatures{};
  const uint64_t xcr0 = read_xcr0();
  const bool os_ymm = (xcr0 & 0x6) == 0x6;
  const bool os_zmm = (xcr0 & 0xe6) == 0xe6;
  if (!os_ymm) return CpuFeatures{};
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  f.avx2 = ebx & (1u << 5);
  if (os_zmm) {
    f.avx512f = ebx & (1u << 16);
    f.avx512dq = ebx & (1u << 17);
    f.avx512bw = ebx & (1u << 30);
    f.avx512vl = ebx & (1u << 31);
    f.avx512_vnni = ecx & (1u << 11);
    unsigned a1, b1, c1, d1;
    __cpuid_count(7, 1, a1, b1, c1, d1);
    f.avx512_bf16 = a1 & (1u << 5);
  }
  return f;
}
#elif defined(__aarch64__)
CpuFeatures detect() {
  CpuFeatures f;
  f.neon = true;  // mandatory on AArch64
  return f;
}
#else
CpuFeatures detect() {
  return CpuFeatures{};
}
#endif

}  // namespace

std::string CpuFeatures::describe() const {
  std::string s;
  auto add = [&s](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(avx2, "avx2");
  add(fma, "fma");
  add(f16c, "f16c");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512vl, "avx512vl");
  add(avx512dq, "avx512dq");
  add(avx512_vnni, "avx512_vnni");
  add(avx512_bf16, "avx512_bf16");
  add(neon, "neon");
  return s.empty() ? "none" : s;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

}  // namespace pagoda
