// Test-only GGUF byte builder: writes files byte by byte from the spec (ggml docs/gguf.md) so
// tests control every field, including broken ones (bad magic, wrong counts, offsets out of
// range, unknown types). Independent of the reader under test and of src/loader/gguf_writer.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace pagoda::test {

class GgufBuilder {
 public:
  // Value type ids (gguf.md).
  static constexpr uint32_t kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6,
                            kBool = 7, kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12;

  struct TensorSpec {
    std::string name;
    std::vector<uint64_t> dims;  // ggml order: dims[0] contiguous
    uint32_t type = 0;
    std::vector<uint8_t> data;
    std::optional<uint64_t> offset;  // default: packed in order, aligned
    bool write_data = true;          // false: the info points at bytes the file lacks
  };

  uint32_t version = 3;
  uint32_t magic = 0x46554747;
  uint64_t alignment = 32;  // for the layout; add general.alignment yourself to change it
  std::optional<uint64_t> kv_count_override;
  std::optional<uint64_t> tensor_count_override;

  template <typename T>
  static void put(std::vector<uint8_t>& out, T v) {
    const size_t at = out.size();
    out.resize(at + sizeof(T));
    std::memcpy(out.data() + at, &v, sizeof(T));
  }
  static void put_string(std::vector<uint8_t>& out, const std::string& s) {
    put<uint64_t>(out, s.size());
    out.insert(out.end(), s.begin(), s.end());
  }

  // A key with an already encoded value (type id + payload).
  void kv_raw(const std::string& key, uint32_t type, const std::vector<uint8_t>& payload) {
    put_string(kv_, key);
    put<uint32_t>(kv_, type);
    kv_.insert(kv_.end(), payload.begin(), payload.end());
    ++num_kv_;
  }
  template <typename T>
  void kv(const std::string& key, uint32_t type, T value) {
    std::vector<uint8_t> p;
    put<T>(p, value);
    kv_raw(key, type, p);
  }
  void kv_string(const std::string& key, const std::string& value) {
    std::vector<uint8_t> p;
    put_string(p, value);
    kv_raw(key, kString, p);
  }
  template <typename T>
  void kv_array(const std::string& key, uint32_t element_type, const std::vector<T>& values) {
    std::vector<uint8_t> p;
    put<uint32_t>(p, element_type);
    put<uint64_t>(p, values.size());
    for (const T& v : values) put<T>(p, v);
    kv_raw(key, kArray, p);
  }
  void kv_string_array(const std::string& key, const std::vector<std::string>& values) {
    std::vector<uint8_t> p;
    put<uint32_t>(p, kString);
    put<uint64_t>(p, values.size());
    for (const std::string& v : values) put_string(p, v);
    kv_raw(key, kArray, p);
  }

  void tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type,
              std::vector<uint8_t> data) {
    tensors.push_back({name, std::move(dims), type, std::move(data), std::nullopt, true});
  }

  std::vector<TensorSpec> tensors;

  std::vector<uint8_t> build() const {
    std::vector<uint8_t> out;
    put<uint32_t>(out, magic);
    put<uint32_t>(out, version);
    put<uint64_t>(out, tensor_count_override.value_or(tensors.size()));
    put<uint64_t>(out, kv_count_override.value_or(num_kv_));
    out.insert(out.end(), kv_.begin(), kv_.end());
    std::vector<uint64_t> offsets;
    uint64_t next = 0;
    for (const TensorSpec& t : tensors) {
      const uint64_t offset = t.offset.value_or(next);
      offsets.push_back(offset);
      next = (offset + t.data.size() + alignment - 1) / alignment * alignment;
      put_string(out, t.name);
      put<uint32_t>(out, static_cast<uint32_t>(t.dims.size()));
      for (uint64_t d : t.dims) put<uint64_t>(out, d);
      put<uint32_t>(out, t.type);
      put<uint64_t>(out, offset);
    }
    out.resize((out.size() + alignment - 1) / alignment * alignment, 0);
    const size_t data_start = out.size();
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (!tensors[i].write_data) continue;
      const size_t end = data_start + offsets[i] + tensors[i].data.size();
      if (out.size() < end) out.resize(end, 0);
      std::memcpy(out.data() + data_start + offsets[i], tensors[i].data.data(),
                  tensors[i].data.size());
    }
    return out;
  }

  static void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  }
  void write(const std::string& path) const { write_file(path, build()); }

 private:
  std::vector<uint8_t> kv_;
  uint64_t num_kv_ = 0;
};

}  // namespace pagoda::test
