// Writing safetensors files through a writable memory map; see safetensors_writer.h.
#include "loader/safetensors_writer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <numeric>

#include <fstream>

#include "loader/safetensors.h"
#include "util/error.h"

namespace pagoda {

const char* safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kI8:
      return "I8";
    case DType::kI4:
      return "U8";  // two values per byte; the shape's last dimension is halved
  }
  return "?";
}

SafetensorsWriter::SafetensorsWriter(const std::string& path, std::vector<TensorLayout> tensors,
                                     const nlohmann::json& metadata)
    : path_(path), tensors_(std::move(tensors)) {
  const size_t n = tensors_.size();
  offsets_.resize(n);
  sizes_.resize(n);
  std::vector<int64_t> element_sizes(n);
  for (size_t i = 0; i < n; ++i) {
    element_sizes[i] = safetensors_dtype_size(tensors_[i].dtype);
    if (element_sizes[i] == 0) {
      fail("{}: tensor {}: unknown safetensors dtype '{}'", path, tensors_[i].name,
           tensors_[i].dtype);
    }
    int64_t elements = 1;
    for (int64_t d : tensors_[i].shape) {
      if (d < 0) fail("{}: tensor {}: negative dimension in its shape", path, tensors_[i].name);
      elements *= d;
    }
    sizes_[i] = elements * element_sizes[i];
  }

  // Largest elements first keeps every tensor aligned to its element size (the data section
  // itself starts 8-aligned); the format forbids holes, so no padding between tensors.
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return element_sizes[a] > element_sizes[b]; });
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (size_t i : order) {
    const TensorLayout& t = tensors_[i];
    if (header.contains(t.name)) fail("{}: tensor {} appears twice", path, t.name);
    offsets_[i] = offset;
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + static_cast<uint64_t>(sizes_[i])}}};
    offset += static_cast<uint64_t>(sizes_[i]);
  }
  if (!metadata.is_null()) header["__metadata__"] = metadata;
  std::string header_text = header.dump();
  header_text.resize((header_text.size() + 7) / 8 * 8, ' ');
  data_offset_ = 8 + header_text.size();
  file_size_ = data_offset_ + offset;

  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("{}: cannot create: {}", path, std::strerror(errno));
  // Reserve the blocks now: running out of disk later, inside the map, would be a SIGBUS.
  int err = ::posix_fallocate(fd_, 0, static_cast<off_t>(file_size_));
  if (err == EOPNOTSUPP || err == EINVAL) {
    err = ::ftruncate(fd_, static_cast<off_t>(file_size_)) == 0 ? 0 : errno;
  }
  if (err != 0) {
    ::close(fd_);
    fd_ = -1;
    fail("{}: cannot allocate {} bytes: {}", path, file_size_, std::strerror(err));
  }
  void* p = ::mmap(nullptr, file_size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) {
    err = errno;
    ::close(fd_);
    fd_ = -1;
    fail("{}: cannot map for writing: {}", path, std::strerror(err));
  }
  map_ = static_cast<uint8_t*>(p);
  const uint64_t header_len = header_text.size();
  for (int i = 0; i < 8; ++i) map_[i] = static_cast<uint8_t>(header_len >> (8 * i));
  std::memcpy(map_ + 8, header_text.data(), header_text.size());
}

void SafetensorsWriter::finish() {
  if (map_ != nullptr) {
    ::munmap(map_, file_size_);
    map_ = nullptr;
  }
  if (fd_ >= 0) {
    const int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) fail("{}: error closing after write: {}", path_, std::strerror(errno));
  }
}

SafetensorsWriter::~SafetensorsWriter() {
  try {
    finish();
  } catch (const Error&) {
    // Destructors must not throw; callers who care call finish() themselves.
  }
}

void write_safetensors(const std::string& path, const std::vector<TensorBytes>& tensors) {
  std::vector<TensorLayout> layouts;
  for (const TensorBytes& t : tensors) layouts.push_back(t.layout);
  SafetensorsWriter writer(path, std::move(layouts));
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (static_cast<int64_t>(tensors[i].bytes.size()) != writer.size_bytes(i)) {
      fail("{}: tensor {}: {} bytes given, its shape and dtype need {}", path,
           tensors[i].layout.name, tensors[i].bytes.size(), writer.size_bytes(i));
    }
    if (!tensors[i].bytes.empty()) {
      std::memcpy(writer.data(i), tensors[i].bytes.data(), tensors[i].bytes.size());
    }
  }
  writer.finish();
}

void write_safetensors_raw(const std::string& path, const std::string& header,
                           std::span<const uint8_t> data, int64_t header_len) {
  const uint64_t len = header_len < 0 ? header.size() : static_cast<uint64_t>(header_len);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail("{}: cannot create", path);
  char prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>(len >> (8 * i));
  out.write(prefix, 8);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  if (!out) fail("{}: write failed", path);
}

}  // namespace pagoda
