// Reading GGUF files (llama.cpp's single-file model format), memory-mapped and validated at
// open so later code can trust every offset and size; tensor bytes are used in place.
//
// Format (ggml docs/gguf.md), all little-endian:
//   "GGUF" magic, u32 version (2 or 3), u64 tensor_count, u64 metadata_kv_count,
//   metadata: {string key, u32 value_type, value} (arrays: u32 element type, u64 count, values;
//             strings: u64 length, bytes without NUL),
//   tensor infos: {string name, u32 n_dims, u64 dims[n_dims], u32 ggml_type, u64 offset},
//   padding to `general.alignment` (default 32), then the data section; tensor offsets are
//   relative to its start and multiples of the alignment.
// Dims are ggml's order: dims[0] is the contiguous (innermost) one, so an HF [out, in] weight
// has dims [in, out].
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loader/gguf_writer.h"  // GgufValueType, shared with the writer
#include "util/mapped_file.h"

namespace pagoda {

const char* gguf_value_type_name(GgufValueType type);

// ggml tensor types Pagoda knows by id (the ones it repacks, and the rest so errors can name
// them). Ids follow ggml.h's enum ggml_type.
namespace ggml_type {
inline constexpr uint32_t kF32 = 0;
inline constexpr uint32_t kF16 = 1;
inline constexpr uint32_t kQ4_0 = 2;
inline constexpr uint32_t kQ4_1 = 3;
inline constexpr uint32_t kQ5_0 = 6;
inline constexpr uint32_t kQ5_1 = 7;
inline constexpr uint32_t kQ8_0 = 8;
inline constexpr uint32_t kQ4_K = 12;
inline constexpr uint32_t kQ5_K = 13;
inline constexpr uint32_t kQ6_K = 14;
inline constexpr uint32_t kBF16 = 30;
}  // namespace ggml_type

struct GgmlTypeTraits {
  const char* name;    // "Q4_K"
  int64_t block_size;  // elements per block
  int64_t type_size;   // bytes per block
};

// nullptr for an id ggml does not define (or has removed).
const GgmlTypeTraits* ggml_type_traits(uint32_t type);
// "Q4_K", or "type 99" for an unknown id.
std::string ggml_type_name(uint32_t type);

// One metadata value. Scalars live in the fields below; arrays keep a pointer to their packed
// little-endian payload inside the map (numbers), string views into the map (strings) or
// parsed sub-arrays (arrays of arrays).
struct GgufValue {
  GgufValueType type = GgufValueType::kUint8;
  uint64_t uint_value = 0;  // unsigned integer types
  int64_t int_value = 0;    // signed integer types
  double float_value = 0;   // float types
  bool bool_value = false;
  std::string_view string_value;

  GgufValueType element_type = GgufValueType::kUint8;  // arrays
  uint64_t num_elements = 0;
  const uint8_t* elements = nullptr;      // numeric / bool arrays
  std::vector<std::string_view> strings;  // string arrays
  std::vector<GgufValue> arrays;          // arrays of arrays

  bool is_integer() const;
  bool is_float() const;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // ggml order: dims[0] is contiguous
  uint32_t type = 0;          // ggml type id
  uint64_t offset = 0;        // from the start of the data section
  const uint8_t* data = nullptr;
  int64_t size_bytes = 0;

  int64_t num_elements() const;
  // The HF shape: dims reversed ([out, in] for a weight matrix).
  std::vector<int64_t> shape() const;
  // cols = dims[0]; rows = product of the other dims.
  int64_t cols() const { return dims.empty() ? 1 : dims[0]; }
  int64_t rows() const;
};

class GgufFile {
 public:
  // Maps and validates `path`. Throws pagoda::Error with one line naming the file and the
  // problem (bad magic, unsupported version, truncation, unknown type, offset out of range...).
  explicit GgufFile(const std::string& path, FileMemory memory = FileMemory::kMap);
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return file_->path(); }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // start of the data section

  // Metadata by key.
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const GgufValue* find(const std::string& key) const;
  bool contains(const std::string& key) const { return metadata_.count(key) != 0; }

  // Typed getters. The find_ versions return empty when the key is absent and throw
  // "FILE: metadata key 'K' is a T, expected ..." when it holds the wrong type; integers are
  // accepted for floats. get_ versions also throw "FILE: metadata key 'K' is missing".
  std::optional<std::string> find_string(const std::string& key) const;
  std::optional<int64_t> find_int(const std::string& key) const;
  std::optional<double> find_float(const std::string& key) const;
  std::optional<bool> find_bool(const std::string& key) const;
  std::string get_string(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;
  // Arrays; an absent key gives an empty vector.
  std::vector<std::string_view> string_array(const std::string& key) const;
  std::vector<int64_t> int_array(const std::string& key) const;
  std::vector<float> float_array(const std::string& key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(const std::string& name) const;

  // Drops the whole pages of `info`'s bytes from resident memory, for a tensor repacked into
  // memory of its own (MappedFile::drop_pages: a map's pages come back from the file if read
  // again; a copy keeps them). Returns the bytes dropped.
  size_t drop_tensor_pages(const GgufTensorInfo& info) const {
    return file_->drop_pages(info.data, info.data + info.size_bytes);
  }

 private:
  std::unique_ptr<MappedFile> file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

}  // namespace pagoda
