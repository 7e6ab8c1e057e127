#include "device/cpu_device.h"

#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "util/error.h"
#include "util/huge_buffer.h"

namespace pagoda {
namespace {

// HugeBuffer's choice of pages for a policy. Huge-first leaves a buffer smaller than one huge
// page on normal pages, as CANN's ACL_MEM_MALLOC_HUGE_FIRST does below 1 MB: a 2 MiB page for a
// few kilobytes would waste the rest of it, and explicit huge pages are a reserved pool.
HugeBufferOptions page_options(size_t size_bytes, const AllocationOptions& options) {
  HugeBufferOptions o;
  o.prefault = options.prefault;
  o.progress = options.progress;
  const bool huge =
      options.policy == MemoryPolicy::kHugeOnly ||
      (options.policy == MemoryPolicy::kHugeFirst && size_bytes >= default_huge_page_bytes());
  o.allow_explicit_huge = huge;
  o.allow_transparent_huge = huge;
  return o;
}

// A value of /proc/meminfo in bytes (its lines read "Key:   123 kB"), 0 if absent.
size_t meminfo_bytes(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) != 0) continue;
    std::istringstream fields(line.substr(key.size()));
    size_t kib = 0;
    fields >> kib;
    return kib * 1024;
  }
  return 0;
}

}  // namespace

DeviceBuffer CpuDevice::allocate(size_t size_bytes, const AllocationOptions& options) {
  if (size_bytes == 0) fail("cpu device: cannot allocate 0 bytes");
  auto pages = std::make_unique<HugeBuffer>(
      HugeBuffer::allocate(size_bytes, page_options(size_bytes, options)));
  const bool huge = pages->kind() != PageKind::kPlain;
  if (options.policy == MemoryPolicy::kHugeOnly && !huge) {
    fail(
        "cpu device: no huge pages for {} bytes (neither reserved hugetlbfs pages nor "
        "transparent huge pages are available)",
        size_bytes);
  }
  allocated_bytes_ += pages->mapped_bytes();
  void* data = pages->data();
  const size_t mapped = pages->mapped_bytes();
  const std::string_view kind = pages->kind_name();  // page_kind_name's static strings
  return make_buffer(data, size_bytes, mapped, huge, kind, pages.release());
}

void CpuDevice::free(DeviceBuffer::Handle handle) noexcept {
  auto* pages = static_cast<HugeBuffer*>(handle);
  allocated_bytes_ -= pages->mapped_bytes();
  delete pages;
}

MemoryUsage CpuDevice::memory_usage() const {
  MemoryUsage usage;
  usage.total_bytes = meminfo_bytes("MemTotal:");
  usage.free_bytes = meminfo_bytes("MemAvailable:");
  usage.allocated_bytes = allocated_bytes_.load();
  return usage;
}

void CpuDevice::copy(void* dst, const void* src, size_t size_bytes, CopyKind) {
  std::memcpy(dst, src, size_bytes);
}

CpuDevice& cpu_device() {
  // Never destroyed: a buffer held by a static object may be freed after other statics are gone.
  static CpuDevice* const device = new CpuDevice;
  return *device;
}

}  // namespace pagoda
