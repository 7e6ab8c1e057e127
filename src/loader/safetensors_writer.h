// Writing safetensors files. The writer lays out the header, creates the file at its final
// size and maps it, so callers fill tensor data in place (no staging copy): the model
// generator writes gigabytes of random weights this way. Tests also use the raw writer to
// build deliberately broken files.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/dtype.h"

namespace pagoda {

struct TensorLayout {
  std::string name;
  std::string dtype;  // safetensors name: "F32", "F16", "BF16" (others are written as given)
  std::vector<int64_t> shape;
};

// "F32" / "F16" / "BF16".
const char* safetensors_dtype_name(DType dtype);

class SafetensorsWriter {
 public:
  // Creates `path` (replacing it) with room for every tensor and maps it for writing.
  // Tensors are stored in order of decreasing element size, then in the given order, so each
  // one starts aligned to its element size. The header is padded with spaces to 8 bytes.
  // Throws pagoda::Error naming the path (unknown dtype, disk full, ...).
  SafetensorsWriter(const std::string& path, std::vector<TensorLayout> tensors,
                    const nlohmann::json& metadata = {{"format", "pt"}});
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  size_t num_tensors() const { return tensors_.size(); }
  const TensorLayout& layout(size_t index) const { return tensors_[index]; }
  // Where tensor `index` (in the order given to the constructor) goes; size_bytes(index) bytes.
  uint8_t* data(size_t index) { return map_ + data_offset_ + offsets_[index]; }
  int64_t size_bytes(size_t index) const { return sizes_[index]; }
  uint64_t file_size_bytes() const { return file_size_; }

  // Unmaps and closes the file, reporting any write error. Called by the destructor if not
  // called before (errors there are swallowed).
  void finish();

 private:
  std::string path_;
  std::vector<TensorLayout> tensors_;
  std::vector<uint64_t> offsets_;  // relative to the data section
  std::vector<int64_t> sizes_;
  uint64_t data_offset_ = 0;  // 8 + header length
  uint64_t file_size_ = 0;
  int fd_ = -1;
  uint8_t* map_ = nullptr;
};

// Writes whole tensors from memory: convenient for small files and tests.
struct TensorBytes {
  TensorLayout layout;
  std::vector<uint8_t> bytes;
};
void write_safetensors(const std::string& path, const std::vector<TensorBytes>& tensors);

// Writes exactly: 8-byte little-endian `header_len`, `header`, `data`. For tests of broken
// files; `header_len` defaults to header.size().
void write_safetensors_raw(const std::string& path, const std::string& header,
                           std::span<const uint8_t> data, int64_t header_len = -1);

}  // namespace pagoda
