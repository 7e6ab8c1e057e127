// GGUF v3 writer and ggml's Q8_0 / Q4_0 reference block quantization; see gguf_writer.h.
#include "loader/gguf_writer.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <utility>

#include "util/error.h"
#include "util/half.h"

namespace pagoda {
namespace {

static_assert(std::endian::native == std::endian::little, "GGUF is written little-endian");

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

void put_string(std::vector<uint8_t>& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

int64_t align_up(int64_t n, int64_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

int64_t product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

const char* ggml_type_name(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
      return "F32";
    case GgmlType::kF16:
      return "F16";
    case GgmlType::kQ4_0:
      return "Q4_0";
    case GgmlType::kQ8_0:
      return "Q8_0";
    case GgmlType::kBF16:
      return "BF16";
  }
  return "?";
}

int64_t ggml_block_size(GgmlType type) {
  return type == GgmlType::kQ4_0 || type == GgmlType::kQ8_0 ? kGgmlQuantBlock : 1;
}

int64_t ggml_block_bytes(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
      return 4;
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return 2;
    case GgmlType::kQ4_0:
      return kQ4_0BlockBytes;
    case GgmlType::kQ8_0:
      return kQ8_0BlockBytes;
  }
  return 0;
}

int64_t ggml_nbytes(GgmlType type, int64_t num_elements) {
  const int64_t block = ggml_block_size(type);
  if (num_elements % block != 0)
    fail("{} values do not fill whole {} blocks of {}", num_elements, ggml_type_name(type), block);
  return num_elements / block * ggml_block_bytes(type);
}

// The arithmetic below follows ggml-quants.c step by step in fp32 (multiply by the reciprocal,
// then round), because the point is to produce the very bytes llama.cpp's own quantizer would.
void quantize_q8_0(const float* src, int64_t n, uint8_t* dst) {
  for (int64_t b = 0; b < n / kGgmlQuantBlock; ++b) {
    const float* x = src + b * kGgmlQuantBlock;
    uint8_t* block = dst + b * kQ8_0BlockBytes;
    float amax = 0.0f;
    for (int64_t j = 0; j < kGgmlQuantBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t d16 = f32_to_f16(d);
    std::memcpy(block, &d16, 2);
    for (int64_t j = 0; j < kGgmlQuantBlock; ++j) {
      const float scaled = x[j] * id;
      block[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(scaled)));
    }
  }
}

void quantize_q4_0(const float* src, int64_t n, uint8_t* dst) {
  constexpr int64_t kHalf = kGgmlQuantBlock / 2;
  for (int64_t b = 0; b < n / kGgmlQuantBlock; ++b) {
    const float* x = src + b * kGgmlQuantBlock;
    uint8_t* block = dst + b * kQ4_0BlockBytes;
    float amax = 0.0f, max = 0.0f;
    for (int64_t j = 0; j < kGgmlQuantBlock; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t d16 = f32_to_f16(d);
    std::memcpy(block, &d16, 2);
    for (int64_t j = 0; j < kHalf; ++j) {
      const float x0 = x[j] * id;
      const float x1 = x[j + kHalf] * id;
      // x * id lies in [-8, 8] (up to rounding), so x + 8.5 is positive and the cast truncates
      // toward zero as ggml's (int8_t) cast does.
      const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>(x0 + 8.5f)));
      const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>(x1 + 8.5f)));
      block[2 + j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void dequantize_q8_0(const uint8_t* src, int64_t n, float* dst) {
  for (int64_t b = 0; b < n / kGgmlQuantBlock; ++b) {
    const uint8_t* block = src + b * kQ8_0BlockBytes;
    uint16_t d16;
    std::memcpy(&d16, block, 2);
    const float d = f16_to_f32(d16);
    for (int64_t j = 0; j < kGgmlQuantBlock; ++j)
      dst[b * kGgmlQuantBlock + j] = d * static_cast<float>(static_cast<int8_t>(block[2 + j]));
  }
}

void dequantize_q4_0(const uint8_t* src, int64_t n, float* dst) {
  constexpr int64_t kHalf = kGgmlQuantBlock / 2;
  for (int64_t b = 0; b < n / kGgmlQuantBlock; ++b) {
    const uint8_t* block = src + b * kQ4_0BlockBytes;
    uint16_t d16;
    std::memcpy(&d16, block, 2);
    const float d = f16_to_f32(d16);
    float* y = dst + b * kGgmlQuantBlock;
    for (int64_t j = 0; j < kHalf; ++j) {
      y[j] = d * static_cast<float>((block[2 + j] & 0x0f) - 8);
      y[j + kHalf] = d * static_cast<float>((block[2 + j] >> 4) - 8);
    }
  }
}

void encode_f32(GgmlType type, const float* src, int64_t n, uint8_t* dst) {
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case GgmlType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_f16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case GgmlType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_bf16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case GgmlType::kQ8_0:
      ggml_nbytes(type, n);  // checks whole blocks
      quantize_q8_0(src, n, dst);
      return;
    case GgmlType::kQ4_0:
      ggml_nbytes(type, n);
      quantize_q4_0(src, n, dst);
      return;
  }
}

GgufWriter::GgufWriter(int64_t alignment) : alignment_(alignment) {
  if (alignment <= 0 || (alignment & (alignment - 1)) != 0)
    fail("GGUF alignment {} is not a power of two", alignment);
  if (alignment != kGgufDefaultAlignment)
    set_u32("general.alignment", static_cast<uint32_t>(alignment));
}

std::vector<uint8_t>& GgufWriter::new_kv(const std::string& key, GgufValueType type) {
  if (!keys_.insert(key).second) fail("GGUF metadata key '{}' is set twice", key);
  kvs_.push_back(Kv{key, {}});
  put<uint32_t>(kvs_.back().encoded, static_cast<uint32_t>(type));
  return kvs_.back().encoded;
}

void GgufWriter::set_u8(const std::string& key, uint8_t v) {
  put(new_kv(key, GgufValueType::kUint8), v);
}
void GgufWriter::set_i8(const std::string& key, int8_t v) {
  put(new_kv(key, GgufValueType::kInt8), v);
}
void GgufWriter::set_u16(const std::string& key, uint16_t v) {
  put(new_kv(key, GgufValueType::kUint16), v);
}
void GgufWriter::set_i16(const std::string& key, int16_t v) {
  put(new_kv(key, GgufValueType::kInt16), v);
}
void GgufWriter::set_u32(const std::string& key, uint32_t v) {
  put(new_kv(key, GgufValueType::kUint32), v);
}
void GgufWriter::set_i32(const std::string& key, int32_t v) {
  put(new_kv(key, GgufValueType::kInt32), v);
}
void GgufWriter::set_u64(const std::string& key, uint64_t v) {
  put(new_kv(key, GgufValueType::kUint64), v);
}
void GgufWriter::set_i64(const std::string& key, int64_t v) {
  put(new_kv(key, GgufValueType::kInt64), v);
}
void GgufWriter::set_f32(const std::string& key, float v) {
  put(new_kv(key, GgufValueType::kFloat32), v);
}
void GgufWriter::set_f64(const std::string& key, double v) {
  put(new_kv(key, GgufValueType::kFloat64), v);
}
void GgufWriter::set_bool(const std::string& key, bool v) {
  put<uint8_t>(new_kv(key, GgufValueType::kBool), v ? 1 : 0);
}
void GgufWriter::set_string(const std::string& key, const std::string& v) {
  put_string(new_kv(key, GgufValueType::kString), v);
}

namespace {
template <typename T>
void put_array(std::vector<uint8_t>& out, GgufValueType elem, std::span<const T> v) {
  put<uint32_t>(out, static_cast<uint32_t>(elem));
  put<uint64_t>(out, v.size());
  for (const T& x : v) put(out, x);
}
}  // namespace

void GgufWriter::set_array_u8(const std::string& key, std::span<const uint8_t> v) {
  put_array(new_kv(key, GgufValueType::kArray), GgufValueType::kUint8, v);
}
void GgufWriter::set_array_i32(const std::string& key, std::span<const int32_t> v) {
  put_array(new_kv(key, GgufValueType::kArray), GgufValueType::kInt32, v);
}
void GgufWriter::set_array_u32(const std::string& key, std::span<const uint32_t> v) {
  put_array(new_kv(key, GgufValueType::kArray), GgufValueType::kUint32, v);
}
void GgufWriter::set_array_i64(const std::string& key, std::span<const int64_t> v) {
  put_array(new_kv(key, GgufValueType::kArray), GgufValueType::kInt64, v);
}
void GgufWriter::set_array_f32(const std::string& key, std::span<const float> v) {
  put_array(new_kv(key, GgufValueType::kArray), GgufValueType::kFloat32, v);
}
void GgufWriter::set_array_f64(const std::string& key, std::span<const double> v) {
  put_array(new_kv(key, GgufValueType::kArray), GgufValueType::kFloat64, v);
}
void GgufWriter::set_array_bool(const std::string& key, std::span<const bool> v) {
  std::vector<uint8_t>& out = new_kv(key, GgufValueType::kArray);
  put<uint32_t>(out, static_cast<uint32_t>(GgufValueType::kBool));
  put<uint64_t>(out, v.size());
  for (bool b : v) put<uint8_t>(out, b ? 1 : 0);
}
void GgufWriter::set_array_string(const std::string& key, const std::vector<std::string>& v) {
  std::vector<uint8_t>& out = new_kv(key, GgufValueType::kArray);
  put<uint32_t>(out, static_cast<uint32_t>(GgufValueType::kString));
  put<uint64_t>(out, v.size());
  for (const std::string& s : v) put_string(out, s);
}

void GgufWriter::add_tensor(const std::string& name, std::vector<int64_t> shape, GgmlType type,
                            Producer produce) {
  if (name.empty()) fail("GGUF tensor with an empty name");
  if (!tensor_names_.insert(name).second) fail("GGUF tensor '{}' is added twice", name);
  if (shape.empty() || shape.size() > 4)
    fail("GGUF tensor '{}': shape {} must have 1 to 4 dimensions", name, shape_text(shape));
  for (int64_t d : shape) {
    if (d <= 0) fail("GGUF tensor '{}': shape {} has a dimension <= 0", name, shape_text(shape));
  }
  // ggml lays blocks out along ne[0]: each row must be a whole number of them.
  if (shape.back() % ggml_block_size(type) != 0)
    fail("GGUF tensor '{}': {} needs rows of a multiple of {} values, shape is {}", name,
         ggml_type_name(type), ggml_block_size(type), shape_text(shape));
  const int64_t size_bytes = ggml_nbytes(type, product(shape));
  tensors_.push_back(
      TensorEntry{name, std::move(shape), type, size_bytes, data_bytes_, std::move(produce)});
  data_bytes_ += align_up(size_bytes, alignment_);
}

void GgufWriter::add_tensor_bytes(const std::string& name, std::vector<int64_t> shape,
                                  GgmlType type, std::vector<uint8_t> bytes) {
  auto owned = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  const int64_t expected = ggml_nbytes(type, product(shape));
  if (static_cast<int64_t>(owned->size()) != expected)
    fail("GGUF tensor '{}': {} bytes given, {} {} needs {}", name, owned->size(), shape_text(shape),
         ggml_type_name(type), expected);
  add_tensor(name, std::move(shape), type, [owned](uint8_t* dst, int64_t size_bytes) {
    std::memcpy(dst, owned->data(), static_cast<size_t>(size_bytes));
  });
}

int64_t GgufWriter::header_bytes() const {
  int64_t n = 4 + 4 + 8 + 8;
  for (const Kv& kv : kvs_) n += 8 + static_cast<int64_t>(kv.key.size() + kv.encoded.size());
  for (const TensorEntry& t : tensors_)
    n += 8 + static_cast<int64_t>(t.name.size()) + 4 + 8 * static_cast<int64_t>(t.shape.size()) +
         4 + 8;
  return align_up(n, alignment_);
}

int64_t GgufWriter::file_bytes() const {
  return header_bytes() + data_bytes_;
}

void GgufWriter::write(const std::string& path) const {
  std::vector<uint8_t> header;
  header.reserve(static_cast<size_t>(header_bytes()));
  header.insert(header.end(), {'G', 'G', 'U', 'F'});
  put<uint32_t>(header, kGgufVersion);
  put<uint64_t>(header, tensors_.size());
  put<uint64_t>(header, kvs_.size());
  for (const Kv& kv : kvs_) {
    put_string(header, kv.key);
    header.insert(header.end(), kv.encoded.begin(), kv.encoded.end());
  }
  for (const TensorEntry& t : tensors_) {
    put_string(header, t.name);
    put<uint32_t>(header, static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) put<uint64_t>(header, *it);
    put<uint32_t>(header, static_cast<uint32_t>(t.type));
    put<uint64_t>(header, t.offset);
  }
  header.resize(static_cast<size_t>(align_up(static_cast<int64_t>(header.size()), alignment_)), 0);

  const std::string tmp_path = path + ".tmp";
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(tmp_path.c_str(), "wb"), &std::fclose);
  if (!file) fail("{}: cannot create: {}", tmp_path, std::strerror(errno));
  auto write_bytes = [&](const uint8_t* data, size_t n, const std::string& what) {
    if (n != 0 && std::fwrite(data, 1, n, file.get()) != n) {
      const std::string cause = std::strerror(errno);
      file.reset();
      std::remove(tmp_path.c_str());
      fail("{}: writing {} failed: {}", tmp_path, what, cause);
    }
  };
  write_bytes(header.data(), header.size(), "the header");

  std::vector<uint8_t> buffer;
  for (const TensorEntry& t : tensors_) {
    const size_t padded = static_cast<size_t>(align_up(t.size_bytes, alignment_));
    buffer.assign(padded, 0);
    try {
      t.produce(buffer.data(), t.size_bytes);
    } catch (...) {
      file.reset();
      std::remove(tmp_path.c_str());
      throw;
    }
    write_bytes(buffer.data(), padded, "tensor " + t.name);
  }
  FILE* raw = file.release();
  if (std::fclose(raw) != 0) {  // flushes: a full disk may only show here
    std::remove(tmp_path.c_str());
    fail("{}: closing failed: {}", tmp_path, std::strerror(errno));
  }
  if (std::rename(tmp_path.c_str(), path.c_str()) != 0) {
    const std::string cause = std::strerror(errno);
    std::remove(tmp_path.c_str());
    fail("{}: cannot rename {} into place: {}", path, tmp_path, cause);
  }
}

}  // namespace pagoda
