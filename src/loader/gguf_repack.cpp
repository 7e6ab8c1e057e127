// Repacking GGUF tensors into Pagoda's layouts; see gguf_repack.h for what maps to what.
// Block layouts follow ggml's ggml-common.h (block_q8_0, block_q4_K, ...), read from the
// spec and written out here.
#include "loader/gguf_repack.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "util/error.h"
#include "util/half.h"
#include "util/huge_buffer.h"

namespace pagoda {
namespace {

constexpr int64_t kGroup = 32;  // Pagoda group size for every repacked quantized tensor
constexpr int64_t kSuperBlock = 256;

// The bytes of a repacked tensor: values (64-byte aligned for the SIMD kernels) and the fp16
// scale planes.
struct RepackBuffer {
  struct FreeDeleter {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, FreeDeleter> values;
  std::vector<uint16_t> scales;
  std::vector<uint16_t> mins;

  explicit RepackBuffer(int64_t num_bytes) {
    const size_t rounded = static_cast<size_t>((std::max<int64_t>(num_bytes, 1) + 63) / 64 * 64);
    values.reset(static_cast<uint8_t*>(std::aligned_alloc(64, rounded)));
    if (!values) throw std::bad_alloc();
    advise_huge_pages(values.get(), rounded);  // before the first write
  }
};

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

float load_f16(const uint8_t* p) {
  return f16_to_f32(load_u16(p));
}

// Q4_K / Q5_K pack eight 6-bit scales and eight 6-bit mins into 12 bytes: sub-blocks 0-3 in
// the low 6 bits of bytes 0-3 (scales) and 4-7 (mins); sub-blocks 4-7 take their low 4 bits
// from the nibbles of bytes 8-11 and their top 2 bits from the spare top bits of bytes 0-7.
void k_scale_min(const uint8_t* packed, int sub_block, int& scale, int& min) {
  if (sub_block < 4) {
    scale = packed[sub_block] & 63;
    min = packed[sub_block + 4] & 63;
  } else {
    scale = (packed[sub_block + 4] & 0x0f) | ((packed[sub_block - 4] >> 6) << 4);
    min = (packed[sub_block + 4] >> 4) | ((packed[sub_block] >> 6) << 4);
  }
}

// block_q6_K: ql[128] (low 4 bits), qh[64] (high 2 bits), int8 scales[16] (one per 16 values),
// fp16 d. Within each half (128 values) value l + 32k takes its low nibble from ql[l + 32(k&1)]
// (low nibble for k < 2, high for k >= 2) and its high bits from bits 2k..2k+1 of qh[l].
void dequantize_q6_k(const uint8_t* block, float* out) {
  const uint8_t* ql = block;
  const uint8_t* qh = block + 128;
  const auto* scales = reinterpret_cast<const int8_t*>(block + 192);
  const float d = load_f16(block + 208);
  for (int half = 0; half < 2; ++half) {
    const uint8_t* l4 = ql + 64 * half;
    const uint8_t* h2 = qh + 32 * half;
    const int8_t* sc = scales + 8 * half;
    float* y = out + 128 * half;
    // Four 32-value runs k = 0..3; written out so each loop is branch-free (and vectorizes).
    for (int l = 0; l < 32; ++l) {
      const float s0 = d * sc[l / 16], s1 = d * sc[l / 16 + 2];
      const float s2 = d * sc[l / 16 + 4], s3 = d * sc[l / 16 + 6];
      y[l] = s0 * static_cast<float>(((l4[l] & 0x0f) | ((h2[l] & 3) << 4)) - 32);
      y[l + 32] = s1 * static_cast<float>(((l4[l + 32] & 0x0f) | (((h2[l] >> 2) & 3) << 4)) - 32);
      y[l + 64] = s2 * static_cast<float>(((l4[l] >> 4) | (((h2[l] >> 4) & 3) << 4)) - 32);
      y[l + 96] = s3 * static_cast<float>(((l4[l + 32] >> 4) | (((h2[l] >> 6) & 3) << 4)) - 32);
    }
  }
}

// block_q5_K: fp16 d, fp16 dmin, scales[12] (as Q4_K), qh[32], qs[128]. Sub-block s uses the
// low (even s) or high (odd s) nibbles of qs[32 (s / 2) ..] and bit s of qh[l] as the 5th bit.
void dequantize_q5_k(const uint8_t* block, float* out) {
  const float d = load_f16(block);
  const float dmin = load_f16(block + 2);
  const uint8_t* scales = block + 4;
  const uint8_t* qh = block + 16;
  const uint8_t* qs = block + 48;
  for (int s = 0; s < 8; ++s) {
    int sc = 0, m = 0;
    k_scale_min(scales, s, sc, m);
    const float scale = d * sc, min = dmin * m;
    const uint8_t* q = qs + 32 * (s / 2);
    for (int l = 0; l < 32; ++l) {
      const int low = s % 2 == 0 ? (q[l] & 0x0f) : (q[l] >> 4);
      const int high = (qh[l] >> s) & 1;
      out[32 * s + l] = scale * (low + 16 * high) - min;
    }
  }
}

// Symmetric int8 of 32 values: scale rounded to fp16 first, values quantized against it.
// Rounding is to nearest (ties to even) by the 1.5 * 2^23 trick, exact for |x| < 2^22 and
// branch-free so the loop vectorizes; |v / scale| <= 127 (1 + 2^-11) here.
void requantize_i8(const float* v, int8_t* q, uint16_t& scale_bits) {
  float absmax = 0;
  for (int i = 0; i < kGroup; ++i) absmax = std::max(absmax, std::fabs(v[i]));
  scale_bits = f32_to_f16(absmax / 127.0f);
  const float scale = f16_to_f32(scale_bits);
  const float inv = scale > 0 ? 1.0f / scale : 0.0f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23
  for (int i = 0; i < kGroup; ++i) {
    const float r = (v[i] * inv + kRound) - kRound;
    q[i] = static_cast<int8_t>(std::clamp(r, -127.0f, 127.0f));
  }
}

// One repacked row: `src` is the GGUF row (blocks), outputs are that row's slices.
void repack_row(uint32_t type, const uint8_t* src, int64_t cols, uint8_t* values, uint16_t* scales,
                uint16_t* mins) {
  switch (type) {
    case ggml_type::kQ8_0:  // fp16 d, int8 qs[32]
      for (int64_t b = 0; b < cols / 32; ++b) {
        const uint8_t* block = src + 34 * b;
        scales[b] = load_u16(block);
        std::memcpy(values + 32 * b, block + 2, 32);
      }
      return;
    case ggml_type::kQ5_0:  // fp16 d, u32 qh, qs[16]; q = (nibble | bit << 4) - 16
      for (int64_t b = 0; b < cols / 32; ++b) {
        const uint8_t* block = src + 22 * b;
        uint32_t qh;
        std::memcpy(&qh, block + 2, 4);
        const uint8_t* qs = block + 6;
        auto* q = reinterpret_cast<int8_t*>(values + 32 * b);
        for (int j = 0; j < 16; ++j) {
          q[j] = static_cast<int8_t>(((qs[j] & 0x0f) | (((qh >> j) & 1) << 4)) - 16);
          q[j + 16] = static_cast<int8_t>(((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16);
        }
        scales[b] = load_u16(block);
      }
      return;
    case ggml_type::kQ4_0:  // fp16 d, qs[16] in Pagoda's nibble order; w = d * (q - 8)
      for (int64_t b = 0; b < cols / 32; ++b) {
        const uint8_t* block = src + 18 * b;
        scales[b] = load_u16(block);
        mins[b] = f32_to_f16(-8.0f * load_f16(block));
        std::memcpy(values + 16 * b, block + 2, 16);
      }
      return;
    case ggml_type::kQ4_1:  // fp16 d, fp16 m, qs[16]; w = d * q + m
      for (int64_t b = 0; b < cols / 32; ++b) {
        const uint8_t* block = src + 20 * b;
        scales[b] = load_u16(block);
        mins[b] = load_u16(block + 2);
        std::memcpy(values + 16 * b, block + 4, 16);
      }
      return;
    case ggml_type::kQ4_K:  // fp16 d, fp16 dmin, scales[12], qs[128]
      for (int64_t b = 0; b < cols / kSuperBlock; ++b) {
        const uint8_t* block = src + 144 * b;
        const float d = load_f16(block), dmin = load_f16(block + 2);
        const uint8_t* qs = block + 16;
        for (int s = 0; s < 8; ++s) {
          int sc = 0, m = 0;
          k_scale_min(block + 4, s, sc, m);
          const int64_t g = 8 * b + s;
          scales[g] = f32_to_f16(d * static_cast<float>(sc));
          mins[g] = f32_to_f16(-dmin * static_cast<float>(m));
          // Sub-block s is the low (even s) or high (odd s) nibbles of qs[32 (s/2) ..+32];
          // Pagoda wants value j | value j + 16 << 4.
          const uint8_t* q = qs + 32 * (s / 2);
          const int shift = 4 * (s % 2);
          uint8_t* out = values + 16 * g;
          for (int j = 0; j < 16; ++j) {
            out[j] = static_cast<uint8_t>(((q[j] >> shift) & 0x0f) |
                                          (((q[j + 16] >> shift) & 0x0f) << 4));
          }
        }
      }
      return;
    case ggml_type::kQ6_K:
    case ggml_type::kQ5_K: {
      float dequantized[kSuperBlock];
      const int64_t block_bytes = type == ggml_type::kQ6_K ? 210 : 176;
      for (int64_t b = 0; b < cols / kSuperBlock; ++b) {
        if (type == ggml_type::kQ6_K) {
          dequantize_q6_k(src + block_bytes * b, dequantized);
        } else {
          dequantize_q5_k(src + block_bytes * b, dequantized);
        }
        for (int s = 0; s < 8; ++s) {
          const int64_t g = 8 * b + s;
          requantize_i8(dequantized + 32 * s, reinterpret_cast<int8_t*>(values + 32 * g),
                        scales[g]);
        }
      }
      return;
    }
    default:
      break;
  }
}

// Which Pagoda layout a ggml type becomes; false if it is not repacked.
bool target_dtype(uint32_t type, DType& dtype) {
  switch (type) {
    case ggml_type::kF32:
      dtype = DType::kF32;
      return true;
    case ggml_type::kF16:
      dtype = DType::kF16;
      return true;
    case ggml_type::kBF16:
      dtype = DType::kBF16;
      return true;
    case ggml_type::kQ8_0:
    case ggml_type::kQ5_0:
    case ggml_type::kQ6_K:
    case ggml_type::kQ5_K:
      dtype = DType::kI8;
      return true;
    case ggml_type::kQ4_0:
    case ggml_type::kQ4_1:
    case ggml_type::kQ4_K:
      dtype = DType::kI4;
      return true;
    default:
      return false;
  }
}

}  // namespace

int64_t llama_permuted_row(int64_t row, int64_t head_dim) {
  const int64_t head = row / head_dim, within = row % head_dim, half = head_dim / 2;
  const int64_t i = within / half, j = within % half;
  return head * head_dim + 2 * j + i;
}

RepackedTensor repack_gguf_tensor(const std::shared_ptr<const GgufFile>& file,
                                  const GgufTensorInfo& info, const std::string& name,
                                  int64_t unpermute_heads) {
  const std::string& path = file->path();
  DType dtype{};
  if (!target_dtype(info.type, dtype)) {
    fail(
        "{}: tensor {} has type {}, which Pagoda cannot load (supported: F32, F16, BF16, Q8_0, "
        "Q5_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K)",
        path, info.name, ggml_type_name(info.type));
  }
  const int64_t rows = info.rows(), cols = info.cols();
  int64_t head_dim = 0;
  if (unpermute_heads > 0) {
    head_dim = rows / unpermute_heads;
    if (rows % unpermute_heads != 0 || head_dim % 2 != 0) {
      fail("{}: tensor {} has {} rows, which cannot be {} heads of an even head size", path,
           info.name, rows, unpermute_heads);
    }
  }
  auto source_row = [&](int64_t r) { return head_dim ? llama_permuted_row(r, head_dim) : r; };

  RepackedTensor out;
  Tensor& t = out.tensor;
  t.name = name;
  t.path = path;
  t.stored_dtype = ggml_type_name(info.type);
  t.dtype_supported = true;
  t.dtype = dtype;
  t.shape = info.shape();
  const int64_t src_row_bytes = info.size_bytes / rows;

  if (!is_quantized(dtype)) {
    if (head_dim == 0) {  // used in place
      t.data = info.data;
      t.size_bytes = info.size_bytes;
      out.keep_alive = file;
      return out;
    }
    auto buffer = std::make_shared<RepackBuffer>(info.size_bytes);
    uint8_t* dst = buffer->values.get();
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(dst + r * src_row_bytes, info.data + source_row(r) * src_row_bytes,
                  static_cast<size_t>(src_row_bytes));
    }
    t.data = dst;
    t.size_bytes = info.size_bytes;
    out.keep_alive = std::move(buffer);
    file->drop_tensor_pages(info);  // read for the last time: the model is held once
    return out;
  }

  const int64_t row_bytes = dtype_row_bytes(dtype, cols);
  const int64_t groups = cols / kGroup;
  auto buffer = std::make_shared<RepackBuffer>(rows * row_bytes);
  buffer->scales.resize(static_cast<size_t>(rows * groups));
  if (dtype == DType::kI4) buffer->mins.resize(static_cast<size_t>(rows * groups));
  uint8_t* values = buffer->values.get();
  uint16_t* scales = buffer->scales.data();
  uint16_t* mins = dtype == DType::kI4 ? buffer->mins.data() : nullptr;
  const uint32_t type = info.type;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    repack_row(type, info.data + source_row(r) * src_row_bytes, cols, values + r * row_bytes,
               scales + r * groups, mins ? mins + r * groups : nullptr);
  }
  t.data = values;
  t.size_bytes = rows * row_bytes;
  t.scales = scales;
  t.mins = mins;
  t.group_size = kGroup;
  // 1-D quantized tensors do not occur in practice; keep the logical shape 2-D for the kernels.
  if (t.shape.size() == 1) t.shape = {1, cols};
  out.keep_alive = std::move(buffer);
  file->drop_tensor_pages(info);
  return out;
}

}  // namespace pagoda
