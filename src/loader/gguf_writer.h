// Writing GGUF v3 files (the format llama.cpp and its tools read): metadata of every value type,
// arrays included, tensor infos, and tensor data aligned to `general.alignment` (32 by default),
// plus the block quantizations Q8_0 and Q4_0 from fp32. `pagoda export-gguf` builds on it.
//
// Layout (ggml's docs/gguf.md; all little-endian):
//   "GGUF", u32 version = 3, u64 tensor_count, u64 kv_count,
//   kv_count × { string key, u32 value_type, value },   string = u64 length + UTF-8 bytes,
//                                                        array  = u32 elem_type + u64 n + elems
//   tensor_count × { string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset },
//   padding to the alignment, then the data section; each offset is relative to the data
//   section's start and a multiple of the alignment. ne[0] is the innermost (contiguous)
//   dimension, so a row-major [rows, cols] matrix is written as ne = {cols, rows}.
//
// Blocks (ggml-common.h): Q8_0 = { f16 d; int8 q[32] } (34 bytes), w = d * q;
// Q4_0 = { f16 d; u8 qs[16] } (18 bytes), byte j = q[j] | q[j + 16] << 4, w = d * (q - 8).
// Tensor data is produced while the file is written (a callback per tensor), so exporting a
// model needs memory for one tensor at a time, not for the whole file.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <span>
#include <string>
#include <vector>

namespace pagoda {

enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// The ggml tensor types this writer produces (ids from ggml.h's enum ggml_type).
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ8_0 = 8,
  kBF16 = 30,
};

inline constexpr uint32_t kGgufVersion = 3;
inline constexpr int64_t kGgufDefaultAlignment = 32;
inline constexpr int64_t kGgmlQuantBlock = 32;  // values per Q8_0 / Q4_0 block
inline constexpr int64_t kQ8_0BlockBytes = 34;
inline constexpr int64_t kQ4_0BlockBytes = 18;

const char* ggml_type_name(GgmlType type);
// Values per block (1 for the float types) and bytes per block.
int64_t ggml_block_size(GgmlType type);
int64_t ggml_block_bytes(GgmlType type);
// Bytes of `num_elements` values of `type`; throws pagoda::Error if not a whole number of blocks.
int64_t ggml_nbytes(GgmlType type, int64_t num_elements);

// ggml's reference quantizers (quantize_row_q8_0_ref / quantize_row_q4_0_ref), bit for bit:
// Q8_0: d = absmax / 127, q = roundf(x / d) (half away from zero);
// Q4_0: d = m / -8 with m the value of largest magnitude (sign kept, first one on ties),
//       q = min(15, trunc(x / d + 8.5)).
// `n` must be a multiple of 32; dst holds n / 32 blocks.
void quantize_q8_0(const float* src, int64_t n, uint8_t* dst);
void quantize_q4_0(const float* src, int64_t n, uint8_t* dst);
void dequantize_q8_0(const uint8_t* src, int64_t n, float* dst);
void dequantize_q4_0(const uint8_t* src, int64_t n, float* dst);

// fp32 values → `type` (f32 copy, f16 and bf16 round to nearest even, Q8_0, Q4_0).
// dst holds ggml_nbytes(type, n) bytes.
void encode_f32(GgmlType type, const float* src, int64_t n, uint8_t* dst);

class GgufWriter {
 public:
  // Fills dst (exactly the tensor's ggml_nbytes) while the file is being written.
  using Producer = std::function<void(uint8_t* dst, int64_t size_bytes)>;

  // `alignment` must be a power of two; anything but 32 is recorded as general.alignment.
  explicit GgufWriter(int64_t alignment = kGgufDefaultAlignment);

  // Metadata, written in the order added. Each throws pagoda::Error on a repeated key.
  void set_u8(const std::string& key, uint8_t v);
  void set_i8(const std::string& key, int8_t v);
  void set_u16(const std::string& key, uint16_t v);
  void set_i16(const std::string& key, int16_t v);
  void set_u32(const std::string& key, uint32_t v);
  void set_i32(const std::string& key, int32_t v);
  void set_u64(const std::string& key, uint64_t v);
  void set_i64(const std::string& key, int64_t v);
  void set_f32(const std::string& key, float v);
  void set_f64(const std::string& key, double v);
  void set_bool(const std::string& key, bool v);
  void set_string(const std::string& key, const std::string& v);
  void set_array_u8(const std::string& key, std::span<const uint8_t> v);
  void set_array_i32(const std::string& key, std::span<const int32_t> v);
  void set_array_u32(const std::string& key, std::span<const uint32_t> v);
  void set_array_i64(const std::string& key, std::span<const int64_t> v);
  void set_array_f32(const std::string& key, std::span<const float> v);
  void set_array_f64(const std::string& key, std::span<const double> v);
  void set_array_bool(const std::string& key, std::span<const bool> v);
  void set_array_string(const std::string& key, const std::vector<std::string>& v);

  // A tensor of row-major `shape` (outermost first, as PyTorch and safetensors write it; it is
  // stored reversed as ggml's ne). The innermost dimension must be a whole number of blocks.
  void add_tensor(const std::string& name, std::vector<int64_t> shape, GgmlType type,
                  Producer produce);
  // The same with the bytes given now (size must be ggml_nbytes of the shape).
  void add_tensor_bytes(const std::string& name, std::vector<int64_t> shape, GgmlType type,
                        std::vector<uint8_t> bytes);

  size_t num_tensors() const { return tensors_.size(); }
  size_t num_metadata() const { return kvs_.size(); }
  // Total bytes `write` will produce.
  int64_t file_bytes() const;

  // Writes PATH.tmp and renames it to `path`, so a failed export leaves no partial file.
  // Throws pagoda::Error naming the path (and tensor) on any failure.
  void write(const std::string& path) const;

 private:
  struct Kv {
    std::string key;
    std::vector<uint8_t> encoded;  // type + value, as in the file
  };
  struct TensorEntry {
    std::string name;
    std::vector<int64_t> shape;
    GgmlType type;
    int64_t size_bytes;
    int64_t offset;  // in the data section
    Producer produce;
  };

  std::vector<uint8_t>& new_kv(const std::string& key, GgufValueType type);
  int64_t header_bytes() const;  // everything before the data section, padding included

  int64_t alignment_;
  std::vector<Kv> kvs_;
  std::set<std::string> keys_;
  std::vector<TensorEntry> tensors_;
  std::set<std::string> tensor_names_;
  int64_t data_bytes_ = 0;  // data section so far, padded
};

}  // namespace pagoda
