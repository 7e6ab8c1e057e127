// The memory side of a compute device, modelled on what an accelerator runtime offers (CANN's
// aclrtMalloc / aclrtFree / aclrtMemcpy / aclrtSynchronizeDevice / aclrtGetMemUsage, CUDA's
// cudaMalloc family): allocate with a page policy, free, report usage, copy, synchronize.
// Everything the engine keeps in bulk — the KV pool, every weight a model computes with (copied,
// converted, or mapped from the checkpoint through map_host), a model's activations — comes
// from here, so a backend that owns its own memory plugs in behind this class.
// The CPU device (cpu_device.h) is the one implementation today.
#pragma once

#include <cstddef>
#include <string_view>

#include "device/device_buffer.h"

namespace pagoda {

class Progress;

// Where the pages come from, after CANN's aclrtMemMallocPolicy.
enum class MemoryPolicy {
  kHugeFirst,   // huge pages when the size warrants them, else (or when none are left) normal ones
  kHugeOnly,    // huge pages or an error
  kNormalOnly,  // normal pages only
};

// What an allocation holds, for a device's accounting and page choice. The CPU device gives
// weights transparent huge pages at most, leaving the reserved hugetlbfs pool to the KV cache.
enum class MemoryPurpose {
  kWeights,      // a model's weights (WeightLoader, model/weights.h)
  kKvCache,      // the paged KV pool
  kActivations,  // a model's working buffers
};

struct AllocationOptions {
  MemoryPolicy policy = MemoryPolicy::kHugeFirst;
  MemoryPurpose purpose = MemoryPurpose::kActivations;
  // Back every page now instead of at first use, and fail now if the device cannot: the KV pool
  // reserves its memory this way so that a short machine fails at start-up, not mid-request.
  bool prefault = false;
  Progress* progress = nullptr;  // advanced by the bytes prefaulted; optional
};

// What aclrtGetMemUsage reports (total and free), plus what this process holds through the device.
struct MemoryUsage {
  size_t total_bytes = 0;
  size_t free_bytes = 0;
  size_t allocated_bytes = 0;  // live DeviceBuffers of this Device, as mapped
  // Host memory used in place as device memory (map_host): weights read straight from a mapped
  // checkpoint. Always 0 on a device with memory of its own.
  size_t host_mapped_bytes = 0;
};

// Direction of a copy, as aclrtMemcpyKind / cudaMemcpyKind. The CPU device ignores it (every
// pointer is a host pointer); an accelerator chooses its DMA path by it.
enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice };

class Device {
 public:
  virtual ~Device() = default;

  // "cpu", "npu:0", "cuda:0" — for logs.
  virtual std::string_view name() const = 0;

  // `size_bytes` > 0. Memory starts zeroed. Throws pagoda::Error when the device cannot supply it
  // (the size and the cause in the message).
  virtual DeviceBuffer allocate(size_t size_bytes, const AllocationOptions& options = {}) = 0;

  // Bytes that already sit in host memory (a memory-mapped checkpoint, a loader's conversion of
  // one), as device memory for as long as the returned buffer lives; `host` must stay valid and
  // unchanged that long. A device with memory of its own copies them in (this default: allocate,
  // copy, synchronize); the CPU device returns `host` itself, so a mapped checkpoint is used in
  // place. Throws pagoda::Error as allocate does.
  virtual DeviceBuffer map_host(const void* host, size_t size_bytes,
                                const AllocationOptions& options = {});

  // True when the host may read and write this device's memory directly (the CPU device, a
  // unified-memory accelerator): weights computed at load are then written in place; otherwise
  // they are written on the host and copied in.
  virtual bool host_accessible() const = 0;

  virtual MemoryUsage memory_usage() const = 0;

  // Copies `size_bytes` from `src` to `dst` (non-overlapping). Ordered with the device's other
  // work; synchronize() waits for it.
  virtual void copy(void* dst, const void* src, size_t size_bytes, CopyKind kind) = 0;

  // Returns once every copy and kernel issued to the device so far has finished.
  virtual void synchronize() = 0;

 protected:
  friend class DeviceBuffer;
  // Releases what allocate() handed out; `handle` is the value allocate() gave the buffer.
  virtual void free(DeviceBuffer::Handle handle) noexcept = 0;
  // For implementations: a buffer owning `data` that gives `handle` back to free().
  // `kind_name` must have static storage.
  DeviceBuffer make_buffer(void* data, size_t size_bytes, size_t mapped_bytes, bool huge_pages,
                           std::string_view kind_name, DeviceBuffer::Handle handle) {
    return DeviceBuffer(this, data, size_bytes, mapped_bytes, huge_pages, kind_name, handle);
  }
};

}  // namespace pagoda
