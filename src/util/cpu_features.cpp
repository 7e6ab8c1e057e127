#include "util/cpu_features.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__aarch64__)
#include <sys/auxv.h>
#include <sys/prctl.h>
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
// The bits of Linux's uapi asm/hwcap.h, spelled out so that an older libc's headers still
// build this file (values from the kernel's arch/arm64/include/uapi/asm/hwcap.h).
constexpr unsigned long kHwcapFp = 1ul << 0;
constexpr unsigned long kHwcapAsimd = 1ul << 1;
constexpr unsigned long kHwcapFphp = 1ul << 9;
constexpr unsigned long kHwcapAsimdhp = 1ul << 10;
constexpr unsigned long kHwcapAsimddp = 1ul << 20;
constexpr unsigned long kHwcapAsimdfhm = 1ul << 23;
constexpr unsigned long kHwcapSve = 1ul << 22;
constexpr unsigned long kHwcap2Sve2 = 1ul << 1;
constexpr unsigned long kHwcap2SveBf16 = 1ul << 12;
constexpr unsigned long kHwcap2I8mm = 1ul << 13;
constexpr unsigned long kHwcap2Bf16 = 1ul << 14;
constexpr int kPrSveGetVl = 51;  // prctl(PR_SVE_GET_VL): the vector length in bytes, low 16 bits

CpuFeatures detect() {
  CpuFeatures f;
  const unsigned long hwcap = getauxval(AT_HWCAP);
  const unsigned long hwcap2 = getauxval(AT_HWCAP2);
  f.asimd = (hwcap & kHwcapFp) && (hwcap & kHwcapAsimd);
  f.fphp = hwcap & kHwcapFphp;
  f.asimdhp = hwcap & kHwcapAsimdhp;
  f.asimddp = hwcap & kHwcapAsimddp;
  f.asimdfhm = hwcap & kHwcapAsimdfhm;
  f.sve = hwcap & kHwcapSve;
  f.sve2 = hwcap2 & kHwcap2Sve2;
  f.svebf16 = hwcap2 & kHwcap2SveBf16;
  f.i8mm = hwcap2 & kHwcap2I8mm;
  f.bf16 = hwcap2 & kHwcap2Bf16;
  if (f.sve) {
    const int vl = prctl(kPrSveGetVl, 0, 0, 0, 0);
    f.sve_vector_bytes = vl > 0 ? (vl & 0xffff) : 0;
  }
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
  add(asimd, "asimd");
  add(asimddp, "asimddp");
  add(fphp, "fphp");
  add(asimdhp, "asimdhp");
  add(asimdfhm, "asimdfhm");
  add(i8mm, "i8mm");
  add(bf16, "bf16");
  add(sve, "sve");
  add(sve2, "sve2");
  add(svebf16, "svebf16");
  if (sve_vector_bytes > 0) s += " (sve " + std::to_string(sve_vector_bytes * 8) + "-bit)";
  return s.empty() ? "none" : s;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

}  // namespace pagoda
