// A Device for tests that keeps memory of its own, as an accelerator would: host mappings are
// copied in (Device::map_host's default), every allocation is counted by purpose, and a chosen
// weight allocation can be made to fail. Its memory is ordinary host memory, so the CPU kernels
// still run on it; with host_accessible false, weights computed at load take the staging path
// (written on the host, then copied in) that a discrete device needs.
#pragma once

#include <cstdlib>
#include <cstring>
#include <map>
#include <string_view>

#include "device/device.h"
#include "util/error.h"

namespace pagoda::test {

class RecordingDevice final : public Device {
 public:
  explicit RecordingDevice(bool host_accessible = true) : host_accessible_(host_accessible) {}

  std::string_view name() const override { return "recording"; }
  bool host_accessible() const override { return host_accessible_; }

  DeviceBuffer allocate(size_t size_bytes, const AllocationOptions& options = {}) override {
    if (options.purpose == MemoryPurpose::kWeights && fail_weight_allocation_ >= 0 &&
        num_weight_allocations_++ == fail_weight_allocation_) {
      fail("recording device: out of memory for {} bytes", size_bytes);
    }
    const size_t padded = (size_bytes + 63) / 64 * 64;
    void* data = std::aligned_alloc(64, padded);
    if (data == nullptr) fail("recording device: aligned_alloc of {} bytes failed", padded);
    std::memset(data, 0, padded);
    auto* block = new Block{size_bytes, options.purpose, data};
    bytes_[options.purpose] += size_bytes;
    return make_buffer(data, size_bytes, size_bytes, false, "recording", block);
  }

  MemoryUsage memory_usage() const override {
    MemoryUsage usage;
    for (const auto& [purpose, bytes] : bytes_) usage.allocated_bytes += bytes;
    return usage;
  }

  void copy(void* dst, const void* src, size_t size_bytes, CopyKind) override {
    std::memcpy(dst, src, size_bytes);
  }
  void synchronize() override {}

  // Live bytes allocated for `purpose`.
  size_t bytes(MemoryPurpose purpose) const {
    const auto it = bytes_.find(purpose);
    return it == bytes_.end() ? 0 : it->second;
  }
  // Weight allocation number `n` (from 0, map_host copies included) throws.
  void fail_weight_allocation(int n) {
    fail_weight_allocation_ = n;
    num_weight_allocations_ = 0;
  }

 protected:
  void free(DeviceBuffer::Handle handle) noexcept override {
    auto* block = static_cast<Block*>(handle);
    bytes_[block->purpose] -= block->size_bytes;
    std::free(block->data);
    delete block;
  }

 private:
  struct Block {
    size_t size_bytes;
    MemoryPurpose purpose;
    void* data;
  };

  bool host_accessible_;
  std::map<MemoryPurpose, size_t> bytes_;
  int fail_weight_allocation_ = -1;
  int num_weight_allocations_ = 0;
};

}  // namespace pagoda::test
