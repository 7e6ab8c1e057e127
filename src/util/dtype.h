// Element types of weight tensors. The three float types are used as stored (memory-mapped);
// the two integer types are Pagoda's own quantized layouts, into which every quantized source
// (load-time `--quantization`, `pagoda quantize` checkpoints, AWQ/GPTQ, GGUF Q8_0/Q4_0/Q4_K/Q6_K)
// is brought, so each kernel exists once per layout rather than once per file format.
//
// Quantized layouts (see WeightView in kernels/kernels.h for the scale planes):
//   kI8: int8 values, row-major [rows, cols]; w = scale[g] * q.
//   kI4: unsigned 4-bit values in [0, 15], row-major, cols / 2 bytes per row. Each run of 32
//        values of a row is 16 bytes: byte j holds value j in its low nibble and value j + 16
//        in its high nibble (GGUF's Q4_0 order, which unpacks with one mask and one shift);
//        w = scale[g] * q + min[g].
// Scales (and mins) are fp16, one per group of `group_size` consecutive values of a row;
// group_size is a multiple of 32 that divides cols (cols itself: one scale per output channel).
#pragma once

#include <cstdint>

namespace pagoda {

enum class DType : uint8_t { kF32, kF16, kBF16, kI8, kI4 };

inline bool is_quantized(DType t) {
  return t == DType::kI8 || t == DType::kI4;
}

// Bytes per element for the float types and kI8; kI4 packs two elements per byte, so use
// dtype_row_bytes for anything that may be quantized.
inline int64_t dtype_size(DType t) {
  return t == DType::kF32 ? 4 : t == DType::kI8 || t == DType::kI4 ? 1 : 2;
}

// Bytes of the values of one row of `cols` elements (scale planes not included).
inline int64_t dtype_row_bytes(DType t, int64_t cols) {
  return t == DType::kI4 ? cols / 2 : cols * dtype_size(t);
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kI8:
      return "int8";
    case DType::kI4:
      return "int4";
  }
  return "?";
}

}  // namespace pagoda
