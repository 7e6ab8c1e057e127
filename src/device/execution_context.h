// What a model's forward pass runs on: the device its memory comes from, the kernel table its
// arithmetic dispatches to, and the threads its work is split over. Passed into
// Model::forward (model/model.h) and every layer (model/layers/) instead of a global table, so
// a second backend is a second context, not an edit in every model.
#pragma once

#include <cstddef>

#include "device/device.h"
#include "device/thread_pool.h"

namespace pagoda {

struct KernelTable;  // kernels/kernels.h: the device room knows it by name only

class ExecutionContext {
 public:
  ExecutionContext(Device& device, const KernelTable& kernels)
      : device_(&device), kernels_(&kernels) {}

  Device& device() const { return *device_; }
  const KernelTable& kernels() const { return *kernels_; }
  const ThreadPool& threads() const { return threads_; }

  // Memory for activations (zeroed), huge pages when large enough. Models allocate when a batch
  // outgrows what they hold, never per token.
  DeviceBuffer allocate_activations(size_t size_bytes) const {
    return device_->allocate(size_bytes, AllocationOptions{});
  }

 private:
  Device* device_;
  const KernelTable* kernels_;
  ThreadPool threads_;
};

}  // namespace pagoda
