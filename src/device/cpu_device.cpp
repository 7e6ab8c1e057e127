#include "device/cpu_device.h"

#include <algorithm>
#include <cstdint>
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
  // The reserved hugetlbfs pool is sized by the operator for the KV cache and activations;
  // weights quantized at load, which come first, must not drain it.
  o.allow_explicit_huge = huge && options.purpose != MemoryPurpose::kWeights;
  o.allow_transparent_huge = huge;
  return o;
}

}  // namespace

// Pages that weights are carved from, freed when the last weight in them is.
struct CpuDevice::WeightSlab {
  HugeBuffer pages;
  size_t used_bytes = 0;
  size_t num_live = 0;
};

// What a CpuDevice buffer's handle points to: pages of its own, a share of a weight slab, or
// host memory it only maps.
struct CpuDevice::Allocation {
  HugeBuffer pages;              // empty for a slab share or a host mapping
  WeightSlab* slab = nullptr;    // a weight's slab
  size_t host_mapped_bytes = 0;  // a host mapping's size
};

namespace {

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

CpuDevice::~CpuDevice() {
  // Buffers must not outlive their device; an empty slab being filled is the device's own.
  if (slab_ != nullptr && slab_->num_live == 0) delete slab_;
}

DeviceBuffer CpuDevice::allocate(size_t size_bytes, const AllocationOptions& options) {
  if (size_bytes == 0) fail("cpu device: cannot allocate 0 bytes");
  if (options.purpose == MemoryPurpose::kWeights && options.policy == MemoryPolicy::kHugeFirst &&
      !options.prefault) {
    return allocate_weight(size_bytes);
  }
  auto allocation = std::make_unique<Allocation>();
  allocation->pages = HugeBuffer::allocate(size_bytes, page_options(size_bytes, options));
  const HugeBuffer* pages = &allocation->pages;
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
  return make_buffer(data, size_bytes, mapped, huge, kind, allocation.release());
}

// Weights come one tensor at a time, tens of thousands for a large MoE model: a mapping each
// would run into the kernel's limit on mappings (vm.max_map_count) and round every tensor up to
// a 2 MiB huge page. They are packed into slabs instead, as a heap would, each slab on
// transparent huge pages; the unused end of the last slab is never touched, so never resident.
DeviceBuffer CpuDevice::allocate_weight(size_t size_bytes) {
  constexpr size_t kSlabBytes = size_t{64} << 20;
  constexpr size_t kAlignment = 64;  // a cache line, and more than any kernel's loads need
  const size_t size = (size_bytes + kAlignment - 1) / kAlignment * kAlignment;
  std::lock_guard<std::mutex> lock(slab_mutex_);
  if (slab_ == nullptr || slab_->pages.size_bytes() - slab_->used_bytes < size) {
    if (slab_ != nullptr && slab_->num_live == 0) {
      allocated_bytes_ -= slab_->pages.mapped_bytes();
      delete slab_;
    }
    auto slab = std::make_unique<WeightSlab>();
    AllocationOptions options;
    options.purpose = MemoryPurpose::kWeights;
    const size_t slab_bytes = std::max(size, kSlabBytes);
    slab->pages = HugeBuffer::allocate(slab_bytes, page_options(slab_bytes, options));
    allocated_bytes_ += slab->pages.mapped_bytes();
    slab_ = slab.release();
  }
  auto allocation = std::make_unique<Allocation>();
  allocation->slab = slab_;
  void* data = static_cast<uint8_t*>(slab_->pages.data()) + slab_->used_bytes;
  slab_->used_bytes += size;
  ++slab_->num_live;
  return make_buffer(data, size_bytes, size, slab_->pages.kind() != PageKind::kPlain,
                     slab_->pages.kind_name(), allocation.release());
}

DeviceBuffer CpuDevice::map_host(const void* host, size_t size_bytes, const AllocationOptions&) {
  if (size_bytes == 0) fail("cpu device: cannot map 0 bytes");
  auto allocation = std::make_unique<Allocation>();
  allocation->host_mapped_bytes = size_bytes;
  host_mapped_bytes_ += size_bytes;
  // The device never writes through it: the buffer's pointer is the caller's read-only memory.
  return make_buffer(const_cast<void*>(host), size_bytes, size_bytes, false, "host mapping",
                     allocation.release());
}

void CpuDevice::free(DeviceBuffer::Handle handle) noexcept {
  auto* allocation = static_cast<Allocation*>(handle);
  allocated_bytes_ -= allocation->pages.mapped_bytes();
  host_mapped_bytes_ -= allocation->host_mapped_bytes;
  if (WeightSlab* slab = allocation->slab) {
    std::lock_guard<std::mutex> lock(slab_mutex_);
    // The slab being filled stays for the next weights; a full one goes with its last weight.
    if (--slab->num_live == 0) {
      if (slab == slab_) {
        slab->used_bytes = 0;
      } else {
        allocated_bytes_ -= slab->pages.mapped_bytes();
        delete slab;
      }
    }
  }
  delete allocation;
}

MemoryUsage CpuDevice::memory_usage() const {
  MemoryUsage usage;
  usage.total_bytes = meminfo_bytes("MemTotal:");
  usage.free_bytes = meminfo_bytes("MemAvailable:");
  usage.allocated_bytes = allocated_bytes_.load();
  usage.host_mapped_bytes = host_mapped_bytes_.load();
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
