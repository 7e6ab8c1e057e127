#include "kernels/quantize.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/lane_panels.h"
#include "util/error.h"
#include "util/half.h"
#include "util/huge_buffer.h"

namespace pagoda {
namespace {

constexpr float kF16Max = 65504.0f;

// Saturates instead of throwing (this runs inside OpenMP regions): a scale beyond fp16's range
// would need weights near a million, which no checkpoint has.
uint16_t scale_to_f16(float scale) {
  return f32_to_f16(std::clamp(scale, -kF16Max, kF16Max));
}

int64_t check_group(int64_t cols, int64_t group_size) {
  if (group_size == 0) group_size = cols;
  if (group_size <= 0 || group_size % 32 != 0 || cols % group_size != 0) {
    fail(
        "cannot quantize {} columns in groups of {}: the group must be a multiple of 32 that "
        "divides the columns",
        cols, group_size);
  }
  return group_size;
}

// One int4 group: the (scale, min) pair with the smallest squared error found by a few rounds
// of assign-then-refit (least squares of x on q) from several shrunken min-max ranges. Plain
// min-max wastes levels on the group's outliers; this halves the KL divergence of stories260K
// (docs/quantization.md). Scale and min are rounded to fp16 before q is chosen.
struct Int4Fit {
  uint16_t scale = 0, min = 0;
};

float assign_int4(const float* x, int64_t n, float scale, float min, uint8_t* q) {
  const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
  float err = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float v = std::clamp(std::nearbyint((x[i] - min) * inv), 0.0f, 15.0f);
    q[i] = static_cast<uint8_t>(v);
    const float e = scale * v + min - x[i];
    err += e * e;
  }
  return err;
}

Int4Fit fit_int4_group(const float* x, int64_t n, uint8_t* q_out) {
  float lo = x[0], hi = x[0];
  for (int64_t i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  std::vector<uint8_t> q(static_cast<size_t>(n));
  Int4Fit best;
  float best_err = std::numeric_limits<float>::infinity();
  auto try_pair = [&](float scale, float min) {
    const uint16_t s16 = scale_to_f16(std::max(scale, 0.0f)), m16 = scale_to_f16(min);
    const float err = assign_int4(x, n, f16_to_f32(s16), f16_to_f32(m16), q.data());
    if (err < best_err) {
      best_err = err;
      best = {s16, m16};
      std::copy(q.begin(), q.end(), q_out);
    }
    return err;
  };
  for (float shrink : {1.0f, 0.95f, 0.9f, 0.85f, 0.8f}) {
    const float mid = 0.5f * (lo + hi), half = 0.5f * (hi - lo) * shrink;
    float scale = 2.0f * half / 15.0f, min = mid - half;
    try_pair(scale, min);
    for (int round = 0; round < 3; ++round) {
      // Refit scale and min to the current assignment: least squares of x on q.
      assign_int4(x, n, f16_to_f32(scale_to_f16(scale)), f16_to_f32(scale_to_f16(min)), q.data());
      double sq = 0, sx = 0, sqq = 0, sqx = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double qi = q[static_cast<size_t>(i)];
        sq += qi;
        sx += x[i];
        sqq += qi * qi;
        sqx += qi * x[i];
      }
      const double det = static_cast<double>(n) * sqq - sq * sq;
      if (det <= 0) break;  // every value got the same level: nothing to refit
      scale = static_cast<float>((static_cast<double>(n) * sqx - sq * sx) / det);
      min = static_cast<float>((sx - scale * sq) / static_cast<double>(n));
      if (!(scale > 0.0f)) break;
      try_pair(scale, min);
    }
  }
  return best;
}

}  // namespace

void quantize_rows_i8(const float* src, int64_t rows, int64_t cols, int64_t group_size, int8_t* q,
                      uint16_t* scales) {
  group_size = check_group(cols, group_size);
  const int64_t groups = cols / group_size;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const float* x = src + r * cols + g * group_size;
      int8_t* out = q + r * cols + g * group_size;
      float absmax = 0.0f;
      for (int64_t i = 0; i < group_size; ++i) absmax = std::max(absmax, std::fabs(x[i]));
      const uint16_t s16 = scale_to_f16(absmax / 127.0f);
      scales[r * groups + g] = s16;
      const float scale = f16_to_f32(s16);
      const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
      for (int64_t i = 0; i < group_size; ++i) {
        const float v = std::nearbyint(x[i] * inv);
        out[i] = static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f));
      }
    }
  }
}

void quantize_rows_i4(const float* src, int64_t rows, int64_t cols, int64_t group_size,
                      uint8_t* packed, uint16_t* scales, uint16_t* mins) {
  group_size = check_group(cols, group_size);
  const int64_t groups = cols / group_size;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<uint8_t> q(static_cast<size_t>(group_size));
    for (int64_t g = 0; g < groups; ++g) {
      const float* x = src + r * cols + g * group_size;
      const Int4Fit fit = fit_int4_group(x, group_size, q.data());
      scales[r * groups + g] = fit.scale;
      mins[r * groups + g] = fit.min;
      // Each run of 32 values: byte j = value j | value j + 16 << 4.
      uint8_t* out = packed + (r * cols + g * group_size) / 2;
      for (int64_t run = 0; run < group_size; run += 32) {
        for (int64_t j = 0; j < 16; ++j) {
          out[run / 2 + j] = static_cast<uint8_t>(q[static_cast<size_t>(run + j)] |
                                                  q[static_cast<size_t>(run + j + 16)] << 4);
        }
      }
    }
  }
}

void dequantize_row_reference(const WeightView& w, int64_t row, float* dst) {
  if (w.lane_panels != nullptr) {
    dequantize_row_reference(unpacked_lane_panel_row(w, row), 0, dst);
    return;
  }
  const int64_t cols = w.cols;
  switch (w.dtype) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16: {
      const auto* base = static_cast<const uint8_t*>(w.data) + row * dtype_row_bytes(w.dtype, cols);
      for (int64_t c = 0; c < cols; ++c) {
        dst[c] = w.dtype == DType::kF32   ? reinterpret_cast<const float*>(base)[c]
                 : w.dtype == DType::kF16 ? f16_to_f32(reinterpret_cast<const f16_t*>(base)[c])
                                          : bf16_to_f32(reinterpret_cast<const bf16_t*>(base)[c]);
      }
      return;
    }
    case DType::kI8: {
      const int8_t* q = static_cast<const int8_t*>(w.data) + row * cols;
      const uint16_t* s = w.scales + row * (cols / w.group_size);
      for (int64_t c = 0; c < cols; ++c) dst[c] = f16_to_f32(s[c / w.group_size]) * q[c];
      return;
    }
    case DType::kI4: {
      const uint8_t* p = static_cast<const uint8_t*>(w.data) + row * (cols / 2);
      const int64_t groups = cols / w.group_size;
      const uint16_t* s = w.scales + row * groups;
      const uint16_t* m = w.mins + row * groups;
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t run = c / 32 * 32, j = c % 32;
        const uint8_t byte = p[run / 2 + j % 16];
        const int q = j < 16 ? byte & 0xf : byte >> 4;
        const int64_t g = c / w.group_size;
        dst[c] = f16_to_f32(s[g]) * static_cast<float>(q) + f16_to_f32(m[g]);
      }
      return;
    }
  }
}

namespace {

// Checks `to` and `src`, and returns the group size quantize_matrix uses (0 → one per row).
int64_t checked_group(const WeightView& src, DType to, int64_t group_size) {
  if (to != DType::kI8 && to != DType::kI4)
    fail("quantize_matrix: {} is not a quantized type", dtype_name(to));
  if (is_quantized(src.dtype))
    fail("quantize_matrix: the source is already {}", dtype_name(src.dtype));
  return check_group(src.cols, group_size);
}

// src quantized into the three planes, which must hold rows x (cols in `to`), rows x groups
// and (kI4) rows x groups values.
WeightView quantize_planes(const WeightView& src, DType to, int64_t group_size, uint8_t* values,
                           uint16_t* scales, uint16_t* mins) {
  const int64_t rows = src.rows, cols = src.cols;
  const int64_t groups = cols / group_size;
  // Widen in row blocks so a 32k-row embedding never needs a full fp32 copy.
  constexpr int64_t kBlockRows = 256;
  std::vector<float> block(static_cast<size_t>(std::min(rows, kBlockRows) * cols));
  for (int64_t r0 = 0; r0 < rows; r0 += kBlockRows) {
    const int64_t n = std::min(kBlockRows, rows - r0);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n; ++r) {
      dequantize_row_reference(src, r0 + r, block.data() + r * cols);
    }
    if (to == DType::kI8) {
      quantize_rows_i8(block.data(), n, cols, group_size,
                       reinterpret_cast<int8_t*>(values) + r0 * cols, scales + r0 * groups);
    } else {
      quantize_rows_i4(block.data(), n, cols, group_size, values + r0 * cols / 2,
                       scales + r0 * groups, mins + r0 * groups);
    }
  }
  WeightView view;
  view.data = values;
  view.dtype = to;
  view.rows = rows;
  view.cols = cols;
  view.scales = scales;
  view.mins = mins;
  view.group_size = group_size;
  return view;
}

}  // namespace

QuantizedMatrix quantize_matrix(const WeightView& src, DType to, int64_t group_size) {
  group_size = checked_group(src, to, group_size);
  const int64_t rows = src.rows, cols = src.cols;
  const int64_t groups = cols / group_size;

  QuantizedMatrix m;
  const int64_t value_bytes = dtype_row_bytes(to, cols) * rows;
  m.values = std::shared_ptr<uint8_t[]>(new uint8_t[static_cast<size_t>(value_bytes)]);
  advise_huge_pages(m.values.get(), static_cast<size_t>(value_bytes));  // before the first write
  m.scales = std::shared_ptr<uint16_t[]>(new uint16_t[static_cast<size_t>(rows * groups)]);
  if (to == DType::kI4) {
    m.mins = std::shared_ptr<uint16_t[]>(new uint16_t[static_cast<size_t>(rows * groups)]);
  }
  m.view = quantize_planes(src, to, group_size, m.values.get(), m.scales.get(), m.mins.get());
  m.size_bytes = weight_bytes(m.view);
  return m;
}

int64_t quantized_matrix_bytes(const WeightView& src, DType to, int64_t group_size) {
  WeightView shape;
  shape.dtype = to;
  shape.rows = src.rows;
  shape.cols = src.cols;
  shape.group_size = checked_group(src, to, group_size);
  return weight_bytes(shape);
}

WeightView quantize_matrix_into(const WeightView& src, DType to, int64_t group_size, void* dst) {
  group_size = checked_group(src, to, group_size);
  auto* values = static_cast<uint8_t*>(dst);
  const int64_t value_bytes = dtype_row_bytes(to, src.cols) * src.rows;
  const int64_t plane = src.rows * (src.cols / group_size);
  auto* scales = reinterpret_cast<uint16_t*>(values + value_bytes);
  uint16_t* mins = to == DType::kI4 ? scales + plane : nullptr;
  return quantize_planes(src, to, group_size, values, scales, mins);
}

bool symmetric_int4_mins(const WeightView& w) {
  if (w.dtype != DType::kI4 || w.scales == nullptr || w.mins == nullptr || w.group_size <= 0) {
    return false;
  }
  const int64_t n = w.rows * (w.cols / w.group_size);
  for (int64_t i = 0; i < n; ++i) {
    // Bits, not ==: +0 and -0 differ in what the kernels would add (and NaN never matches).
    if (std::bit_cast<uint32_t>(f16_to_f32(w.mins[i])) !=
        std::bit_cast<uint32_t>(-8.0f * f16_to_f32(w.scales[i]))) {
      return false;
    }
  }
  return true;
}

int64_t weight_bytes(const WeightView& w) {
  int64_t bytes = dtype_row_bytes(w.dtype, w.cols) * w.rows;
  if (is_quantized(w.dtype)) {
    const int64_t planes = w.dtype == DType::kI4 ? 2 : 1;
    bytes += w.rows * (w.cols / w.group_size) * 2 * planes;
  }
  return bytes;
}

}  // namespace pagoda
