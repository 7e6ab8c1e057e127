// Rows of a float weight tensor (f32, f16, bf16) widened to fp32, for code that rewrites
// checkpoints in another layout: `pagoda export-gguf` and the families' export plans
// (model/model_family.h).
#pragma once

#include <cstdint>

#include "loader/safetensors.h"

namespace pagoda {

// Throws naming the file and tensor unless `t` is stored as f32, f16 or bf16; `reader` is who
// asks ("export-gguf").
void require_float_tensor(const Tensor& t, const char* reader);

// Elements [row * cols, row * cols + cols) of `t` as fp32 into `dst`; the tensor is seen as a
// flat array, so `cols` may be 1 to pick single elements. `t` must be f32, f16 or bf16.
void read_row_f32(const Tensor& t, int64_t row, int64_t cols, float* dst);

}  // namespace pagoda
