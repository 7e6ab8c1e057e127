// Chooses the kernel table once, from the CPU's features (util/cpu_features.h), and lets the
// CLI force another one (`--isa scalar`) for debugging or comparison.
#include <atomic>

#include "kernels/kernels.h"
#include "kernels/tables.h"
#include "util/cpu_features.h"
#include "util/error.h"

namespace pagoda {
namespace {

const KernelTable* best_table() {
  const Isa order[] = {Isa::kAvx512, Isa::kAvx2, Isa::kScalar};
  for (Isa isa : order) {
    if (const KernelTable* table = kernels_for(isa)) return table;
  }
  return &detail::scalar_table();
}

// nullptr until first use or until set_kernel_isa; read on every kernels() call, so atomic.
std::atomic<const KernelTable*> g_forced{nullptr};

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

Isa parse_isa(const std::string& name) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (name == isa_name(isa)) return isa;
  }
  fail("unknown ISA '{}': expected scalar, avx2 or avx512", name);
}

const KernelTable* kernels_for(Isa isa) {
  const CpuFeatures& cpu = cpu_features();
  switch (isa) {
    case Isa::kScalar:
      return &detail::scalar_table();
    case Isa::kAvx2:
#if defined(PAGODA_KERNELS_X86)
      if (cpu.has_avx2_set()) return &detail::avx2_table();
#endif
      return nullptr;
    case Isa::kAvx512:
#if defined(PAGODA_KERNELS_X86)
      if (cpu.has_avx512_set()) return &detail::avx512_table(cpu.avx512_bf16, cpu.avx512_vnni);
#endif
      return nullptr;
  }
  return nullptr;
}

const KernelTable& kernels() {
  const KernelTable* table = g_forced.load(std::memory_order_acquire);
  if (table != nullptr) return *table;
  static const KernelTable* const best = best_table();
  return *best;
}

void set_kernel_isa(Isa isa) {
  const KernelTable* table = kernels_for(isa);
  if (table == nullptr) {
    fail("ISA '{}' is not supported by this CPU (it has: {})", isa_name(isa),
         cpu_features().describe());
  }
  g_forced.store(table, std::memory_order_release);
}

}  // namespace pagoda
