// Widening f32 / f16 / bf16 weight rows to fp32.
#include "loader/tensor_rows.h"

#include <algorithm>

#include "util/error.h"
#include "util/half.h"

namespace pagoda {

void require_float_tensor(const Tensor& t, const char* reader) {
  if (!t.dtype_supported || is_quantized(t.dtype))
    fail("{}: tensor {} is {}; {} reads f32, f16 and bf16 weights", t.path, t.name, t.stored_dtype,
         reader);
}

void read_row_f32(const Tensor& t, int64_t row, int64_t cols, float* dst) {
  const int64_t at = row * cols;
  switch (t.dtype) {
    case DType::kF32:
      std::copy_n(t.data_as<float>() + at, cols, dst);
      return;
    case DType::kF16:
      for (int64_t i = 0; i < cols; ++i) dst[i] = f16_to_f32(t.data_as<uint16_t>()[at + i]);
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < cols; ++i) dst[i] = bf16_to_f32(t.data_as<uint16_t>()[at + i]);
      return;
    default:
      fail("{}: tensor {} is {}; only f32, f16 and bf16 rows can be read as fp32", t.path, t.name,
           dtype_name(t.dtype));
  }
}

}  // namespace pagoda
