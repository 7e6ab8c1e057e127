// The host as a Device: memory is util's HugeBuffer (explicit huge pages, then transparent huge
// pages, then plain pages, interleaved over NUMA nodes), copies are memcpy, and there is nothing
// to wait for (every op has finished when it returns).
#pragma once

#include <atomic>
#include <cstddef>

#include "device/device.h"

namespace pagoda {

class CpuDevice final : public Device {
 public:
  std::string_view name() const override { return "cpu"; }
  DeviceBuffer allocate(size_t size_bytes, const AllocationOptions& options = {}) override;
  // Total and free are the machine's MemTotal and MemAvailable (/proc/meminfo).
  MemoryUsage memory_usage() const override;
  void copy(void* dst, const void* src, size_t size_bytes, CopyKind kind) override;
  void synchronize() override {}

 protected:
  void free(DeviceBuffer::Handle handle) noexcept override;

 private:
  std::atomic<size_t> allocated_bytes_{0};
};

// The process's CPU device: the host is one device however many engines run on it, and its
// allocation count must see them all.
CpuDevice& cpu_device();

}  // namespace pagoda
