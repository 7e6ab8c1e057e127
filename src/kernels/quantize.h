// Quantizing float weights into Pagoda's kI8 / kI4 layouts (util/dtype.h) and back. These are
// the scalar references: load-time `--quantization`, `pagoda quantize` and the GGUF repacker
// use them, and every quantized kernel is tested against dequantize_row.
//
// int8 is symmetric (scale = absmax / 127, zero maps to zero); int4 is asymmetric per group
// (w = scale * q + min, what AWQ/GPTQ zero points and GGUF's Q4_K express too), with scale and
// min fitted to minimise the group's squared error rather than taken from its min and max. Scales
// and mins are rounded to fp16 first and the values quantized against the rounded ones, so
// dequantizing reproduces exactly what the kernels compute.
#pragma once

#include <cstdint>
#include <memory>

#include "kernels/kernels.h"

namespace pagoda {

// src [rows, cols] fp32 → q int8 [rows, cols], scales fp16 [rows, cols / group_size].
void quantize_rows_i8(const float* src, int64_t rows, int64_t cols, int64_t group_size, int8_t* q,
                      uint16_t* scales);
// src [rows, cols] fp32 → packed [rows, cols / 2], scales and mins fp16 [rows, cols / group_size].
void quantize_rows_i4(const float* src, int64_t rows, int64_t cols, int64_t group_size,
                      uint8_t* packed, uint16_t* scales, uint16_t* mins);

// Row `row` of any weight as fp32 (float types widened, quantized ones dequantized).
void dequantize_row_reference(const WeightView& w, int64_t row, float* dst);

// A quantized copy of a weight matrix that owns its bytes (values, scales, mins).
struct QuantizedMatrix {
  std::shared_ptr<uint8_t[]> values;
  std::shared_ptr<uint16_t[]> scales;
  std::shared_ptr<uint16_t[]> mins;  // kI4 only
  WeightView view;                   // points into the arrays above
  int64_t size_bytes = 0;            // values + scales + mins
};

// Quantizes any weight (f32/f16/bf16) to kI8 or kI4 with `group_size` (0: one group per row,
// i.e. per output channel). Threads over rows. Throws pagoda::Error if cols is not a multiple
// of the group size, or the group size of 32.
QuantizedMatrix quantize_matrix(const WeightView& src, DType to, int64_t group_size);

// The same into memory the caller holds (device memory for weights quantized at load): values,
// then the scale plane, then (kI4) the min plane, quantized_matrix_bytes() in all. `dst` must
// be 2-byte aligned. Returns the view of it.
int64_t quantized_matrix_bytes(const WeightView& src, DType to, int64_t group_size);
WeightView quantize_matrix_into(const WeightView& src, DType to, int64_t group_size, void* dst);

// True when w is kI4 and each min equals -8 * its scale as the kernels compute it (fp32, the
// same bits), so WeightView::symmetric_int4 may be set. Reads both planes once.
bool symmetric_int4_mins(const WeightView& w);

// Bytes a weight occupies in memory, scale planes included.
int64_t weight_bytes(const WeightView& w);

}  // namespace pagoda
