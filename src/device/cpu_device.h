// The host as a Device: memory is util's HugeBuffer (explicit huge pages, then transparent huge
// pages, then plain pages, interleaved over NUMA nodes), host mappings are used in place, copies
// are memcpy, and there is nothing to wait for (every op has finished when it returns).
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>

#include "device/device.h"

namespace pagoda {

class CpuDevice final : public Device {
 public:
  CpuDevice() = default;
  ~CpuDevice() override;
  CpuDevice(const CpuDevice&) = delete;
  CpuDevice& operator=(const CpuDevice&) = delete;

  std::string_view name() const override { return "cpu"; }
  DeviceBuffer allocate(size_t size_bytes, const AllocationOptions& options = {}) override;
  // `host` itself: host memory is this device's memory. No copy, no allocation.
  DeviceBuffer map_host(const void* host, size_t size_bytes,
                        const AllocationOptions& options = {}) override;
  bool host_accessible() const override { return true; }
  // Total and free are the machine's MemTotal and MemAvailable (/proc/meminfo).
  MemoryUsage memory_usage() const override;
  void copy(void* dst, const void* src, size_t size_bytes, CopyKind kind) override;
  void synchronize() override {}

 protected:
  void free(DeviceBuffer::Handle handle) noexcept override;

 private:
  struct WeightSlab;
  struct Allocation;
  DeviceBuffer allocate_weight(size_t size_bytes);

  std::atomic<size_t> allocated_bytes_{0};
  std::atomic<size_t> host_mapped_bytes_{0};
  std::mutex slab_mutex_;
  WeightSlab* slab_ = nullptr;  // the slab weights are being packed into; guarded by slab_mutex_
};

// The process's CPU device: the host is one device however many engines run on it, and its
// allocation count must see them all.
CpuDevice& cpu_device();

}  // namespace pagoda
