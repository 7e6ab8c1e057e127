#include "device/device_buffer.h"

#include "device/device.h"

namespace pagoda {

DeviceBuffer Device::map_host(const void* host, size_t size_bytes,
                              const AllocationOptions& options) {
  DeviceBuffer buffer = allocate(size_bytes, options);
  copy(buffer.data(), host, size_bytes, CopyKind::kHostToDevice);
  synchronize();
  return buffer;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    device_ = std::exchange(other.device_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    size_bytes_ = std::exchange(other.size_bytes_, 0);
    mapped_bytes_ = std::exchange(other.mapped_bytes_, 0);
    huge_pages_ = std::exchange(other.huge_pages_, false);
    kind_name_ = std::exchange(other.kind_name_, {});
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

void DeviceBuffer::release() noexcept {
  if (device_ != nullptr && data_ != nullptr) device_->free(handle_);
  device_ = nullptr;
  data_ = nullptr;
  size_bytes_ = 0;
  mapped_bytes_ = 0;
  huge_pages_ = false;
  kind_name_ = {};
  handle_ = nullptr;
}

}  // namespace pagoda
