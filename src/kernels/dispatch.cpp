// Chooses the kernel table once, from the CPU's features (util/cpu_features.h) and this
// architecture's variant list (tables.h), and lets the CLI force another one (`--isa scalar`,
// PAGODA_ISA) for debugging, comparison and bug reports.
#include <algorithm>
#include <atomic>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/tables.h"
#include "util/error.h"

namespace pagoda {

#if !defined(__x86_64__) && !defined(__aarch64__)
std::span<const detail::KernelVariant> detail::architecture_variants() {
  return {};  // no SIMD kernels for this architecture: the scalar reference only
}
#endif

namespace {

// Every variant of this build, scalar included, best (highest priority) first.
const std::vector<detail::KernelVariant>& variants() {
  static const std::vector<detail::KernelVariant> all = [] {
    std::vector<detail::KernelVariant> v(detail::architecture_variants().begin(),
                                         detail::architecture_variants().end());
    v.push_back({"scalar", 0, [](const CpuFeatures&) { return true; },
                 [](const CpuFeatures&) -> const KernelTable& { return detail::scalar_table(); }});
    std::stable_sort(v.begin(), v.end(),
                     [](const auto& a, const auto& b) { return a.priority > b.priority; });
    return v;
  }();
  return all;
}

const detail::KernelVariant* find_variant(std::string_view name) {
  for (const auto& v : variants()) {
    if (name == v.name) return &v;
  }
  return nullptr;
}

const KernelTable* best_table() {
  for (const auto& v : variants()) {
    if (v.supported(cpu_features())) return &v.build(cpu_features());
  }
  return &detail::scalar_table();
}

// nullptr until set_kernel_isa; read on every kernels() call, so atomic.
std::atomic<const KernelTable*> g_forced{nullptr};

}  // namespace

std::vector<std::string> kernel_isa_names() {
  std::vector<std::string> names;
  for (const auto& v : variants()) names.emplace_back(v.name);
  return names;
}

const KernelTable* kernels_for(std::string_view isa) {
  const detail::KernelVariant* v = find_variant(isa);
  if (v == nullptr || !v->supported(cpu_features())) return nullptr;
  return &v->build(cpu_features());
}

const KernelTable& kernels() {
  const KernelTable* table = g_forced.load(std::memory_order_acquire);
  if (table != nullptr) return *table;
  static const KernelTable* const best = best_table();
  return *best;
}

void set_kernel_isa(std::string_view isa) {
  if (find_variant(isa) == nullptr) {
    std::string known;
    for (const auto& name : kernel_isa_names()) known += (known.empty() ? "" : ", ") + name;
    fail("unknown ISA '{}': this build has {}", isa, known);
  }
  const KernelTable* table = kernels_for(isa);
  if (table == nullptr) {
    fail("ISA '{}' is not supported by this CPU (it has: {})", isa, cpu_features().describe());
  }
  g_forced.store(table, std::memory_order_release);
}

}  // namespace pagoda
