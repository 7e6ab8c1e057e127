// A move-only owner of one allocation from a Device: freed through the device that made it when
// the buffer goes out of scope. Typed views (as<T>()) do no bounds checking; the size is the
// caller's to respect.
#pragma once

#include <cstddef>
#include <string_view>
#include <utility>

namespace pagoda {

class Device;

class DeviceBuffer {
 public:
  // What the device needs back to free the memory (the CPU device's HugeBuffer, a CANN pointer).
  using Handle = void*;

  DeviceBuffer() = default;
  ~DeviceBuffer() { release(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t size_bytes() const { return size_bytes_; }      // what was asked for
  size_t mapped_bytes() const { return mapped_bytes_; }  // rounded up to the page size used
  bool huge_pages() const { return huge_pages_; }
  // What backs the memory, for logs ("transparent huge pages", "plain pages", ...).
  std::string_view kind_name() const { return kind_name_; }
  Device* device() const { return device_; }
  explicit operator bool() const { return data_ != nullptr; }

  // Frees now (a no-op on an empty buffer).
  void release() noexcept;

 private:
  friend class Device;
  DeviceBuffer(Device* device, void* data, size_t size_bytes, size_t mapped_bytes, bool huge_pages,
               std::string_view kind_name, Handle handle)
      : device_(device),
        data_(data),
        size_bytes_(size_bytes),
        mapped_bytes_(mapped_bytes),
        huge_pages_(huge_pages),
        kind_name_(kind_name),
        handle_(handle) {}

  Device* device_ = nullptr;
  void* data_ = nullptr;
  size_t size_bytes_ = 0;
  size_t mapped_bytes_ = 0;
  bool huge_pages_ = false;
  std::string_view kind_name_;  // a string with static storage
  Handle handle_ = nullptr;
};

}  // namespace pagoda
