#include "loader/fp8_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/quantize.h"
#include "loader/fp8.h"
#include "loader/safetensors.h"
#include "util/error.h"

namespace pagoda {
namespace {

using nlohmann::json;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// One FP8 matrix and its scale grid, checked.
struct Fp8Matrix {
  const Tensor* weight = nullptr;
  std::vector<float> scales;  // [grid_rows, grid_cols]
  int64_t rows = 0, cols = 0;
  int64_t block_rows = 0, block_cols = 0;
  int64_t grid_cols = 0;

  // Row r of the weight, exactly: each code decoded and multiplied by its block's scale.
  void dequantize_row(int64_t r, float* dst) const {
    const uint8_t* src = weight->data + r * cols;
    const float* row_scales = scales.data() + (r / block_rows) * grid_cols;
    for (int64_t c0 = 0; c0 < cols; c0 += block_cols) {
      const int64_t n = std::min(block_cols, cols - c0);
      e4m3_to_f32_scaled(src + c0, n, row_scales[c0 / block_cols], dst + c0);
    }
  }
};

std::vector<float> read_scales(const Tensor& scale) {
  if (scale.stored_dtype != "F32" && scale.stored_dtype != "BF16") {
    fail("{}: tensor {} has dtype {}, expected F32 (or BF16) FP8 scales", scale.path, scale.name,
         scale.stored_dtype);
  }
  std::vector<float> out(static_cast<size_t>(scale.num_elements()));
  kernels().to_f32(scale.data, scale.dtype, scale.num_elements(), out.data());
  return out;
}

// The block grid a scale tensor implies: the configured blocks for `weight_scale_inv`; for
// `weight_scale`, one scale per tensor ([] or [1]) or per output row ([rows] or [rows, 1]).
Fp8Matrix check(const Tensor& w, const Tensor& scale, bool block_scaled, int64_t block_rows,
                int64_t block_cols) {
  Fp8Matrix m;
  m.weight = &w;
  m.rows = w.shape[0];
  m.cols = w.shape[1];
  if (block_scaled) {
    m.block_rows = block_rows;
    m.block_cols = block_cols;
    const std::vector<int64_t> grid = {ceil_div(m.rows, block_rows), ceil_div(m.cols, block_cols)};
    if (scale.shape != grid) {
      fail(
          "{}: tensor {} has shape {}, expected {}: one scale per [{}, {}] block of {} {} "
          "(ceil of rows / {} by ceil of cols / {})",
          scale.path, scale.name, format_shape(scale.shape), format_shape(grid), block_rows,
          block_cols, w.name, format_shape(w.shape), block_rows, block_cols);
    }
  } else {
    const int64_t n = scale.num_elements();
    const bool per_tensor = n == 1 && scale.shape.size() <= 1;
    const bool per_row = n == m.rows && (scale.shape == std::vector<int64_t>{m.rows} ||
                                         scale.shape == std::vector<int64_t>{m.rows, 1});
    if (!per_tensor && !per_row) {
      fail("{}: tensor {} has shape {}, expected [] or [1] (per tensor) or [{}, 1] (per row of {})",
           scale.path, scale.name, format_shape(scale.shape), m.rows, w.name);
    }
    m.block_rows = per_tensor ? std::max<int64_t>(m.rows, 1) : 1;
    m.block_cols = std::max<int64_t>(m.cols, 1);
  }
  m.grid_cols = ceil_div(m.cols, m.block_cols);
  m.scales = read_scales(scale);
  return m;
}

struct Converted {
  Tensor tensor;
  std::shared_ptr<uint8_t[]> values;
  std::shared_ptr<uint16_t[]> scales, mins;
};

// The int8 group: the FP8 block width keeps one int8 scale per FP8 scale along a row (so no
// block's small values share a step with a neighbour's large ones); a row is one group when
// the block does not divide it. 0: the row cannot be grouped in runs of 32 (kept fp32).
int64_t int8_group(const Fp8Matrix& m) {
  if (m.block_cols % 32 == 0 && m.cols % m.block_cols == 0) return m.block_cols;
  return m.cols % 32 == 0 ? m.cols : 0;
}

Converted convert(const Fp8Matrix& m, Fp8Weights mode) {
  const int64_t rows = m.rows, cols = m.cols;
  int64_t group = mode == Fp8Weights::kInt8 ? int8_group(m) : (cols % 32 == 0 ? 32 : 0);
  if (mode == Fp8Weights::kDequant) group = 0;
  Converted out;
  Tensor& t = out.tensor;
  t.name = m.weight->name;
  t.path = m.weight->path;
  t.stored_dtype = "FP8";
  t.dtype_supported = true;
  t.shape = {rows, cols};
  t.group_size = group;
  if (group == 0) {
    t.dtype = DType::kF32;
    t.size_bytes = rows * cols * static_cast<int64_t>(sizeof(float));
  } else {
    t.dtype = mode == Fp8Weights::kInt8 ? DType::kI8 : DType::kI4;
    t.size_bytes = t.dtype == DType::kI8 ? rows * cols : rows * cols / 2;
    out.scales.reset(new uint16_t[static_cast<size_t>(rows * (cols / group))]);
    if (t.dtype == DType::kI4)
      out.mins.reset(new uint16_t[static_cast<size_t>(rows * (cols / group))]);
  }
  out.values.reset(new uint8_t[static_cast<size_t>(t.size_bytes)]);
  uint8_t* values = out.values.get();
  const int64_t groups = group > 0 ? cols / group : 0;

#pragma omp parallel
  {
    std::vector<float> row(static_cast<size_t>(cols));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      if (group == 0) {
        m.dequantize_row(r, reinterpret_cast<float*>(values) + r * cols);
        continue;
      }
      m.dequantize_row(r, row.data());
      if (t.dtype == DType::kI8) {
        quantize_rows_i8(row.data(), 1, cols, group, reinterpret_cast<int8_t*>(values) + r * cols,
                         out.scales.get() + r * groups);
      } else {
        quantize_rows_i4(row.data(), 1, cols, group, values + r * cols / 2,
                         out.scales.get() + r * groups, out.mins.get() + r * groups);
      }
    }
  }
  t.data = values;
  t.scales = out.scales.get();
  t.mins = out.mins.get();
  return out;
}

}  // namespace

Fp8Weights parse_fp8_weights(const std::string& name) {
  if (name == "dequant") return Fp8Weights::kDequant;
  if (name == "int8") return Fp8Weights::kInt8;
  if (name == "int4") return Fp8Weights::kInt4;
  fail("--fp8-weights: unknown value '{}': expected dequant, int8 or int4", name);
}

const char* fp8_weights_name(Fp8Weights mode) {
  switch (mode) {
    case Fp8Weights::kDequant:
      return "dequant";
    case Fp8Weights::kInt8:
      return "int8";
    case Fp8Weights::kInt4:
      return "int4";
    case Fp8Weights::kAsStored:
      return "as-stored";
  }
  return "?";
}

bool is_fp8_checkpoint(const std::string& model_dir) {
  std::ifstream in(std::filesystem::path(model_dir) / "config.json");
  if (!in) return false;
  const json config = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object() || !config.contains("quantization_config")) return false;
  const json& qc = config["quantization_config"];
  return qc.is_object() && qc.value("quant_method", std::string()) == "fp8";
}

int convert_fp8_weights(TensorStore& store, const json& qc, Fp8Weights mode) {
  if (mode == Fp8Weights::kAsStored) return 0;
  int64_t block_rows = 128, block_cols = 128;
  if (qc.is_object() && qc.value("quant_method", std::string()) == "fp8") {
    const std::string fmt = qc.value("fmt", std::string("e4m3"));
    if (fmt != "e4m3") {
      fail("{}: quantization_config.fmt is '{}'; Pagoda reads FP8 weights in e4m3 only",
           store.path(), fmt);
    }
    if (qc.contains("weight_block_size") && !qc["weight_block_size"].is_null()) {
      const json& b = qc["weight_block_size"];
      if (!b.is_array() || b.size() != 2 || !b[0].is_number_unsigned() ||
          !b[1].is_number_unsigned() || b[0].get<int64_t>() <= 0 || b[1].get<int64_t>() <= 0) {
        fail("{}: quantization_config.weight_block_size is {}, expected [rows, cols] > 0",
             store.path(), b.dump());
      }
      block_rows = b[0].get<int64_t>();
      block_cols = b[1].get<int64_t>();
    }
  }

  std::vector<Fp8Matrix> matrices;
  for (const auto& [name, t] : store.tensors()) {
    if (t.stored_dtype != "F8_E4M3" || !name.ends_with(".weight")) continue;
    if (t.shape.size() != 2) {
      fail("{}: FP8 tensor {} has shape {}; Pagoda reads FP8 matrices (2-D) only", t.path, name,
           format_shape(t.shape));
    }
    const Tensor* block_scale = store.find(name + "_scale_inv");
    const Tensor* plain_scale = store.find(name + "_scale");
    if (block_scale == nullptr && plain_scale == nullptr) {
      fail("{}: FP8 tensor {} has no scale: expected {}_scale_inv (block scales) or {}_scale",
           t.path, name, name, name);
    }
    const bool block_scaled = block_scale != nullptr;
    matrices.push_back(
        check(t, block_scaled ? *block_scale : *plain_scale, block_scaled, block_rows, block_cols));
  }
  for (const Fp8Matrix& m : matrices) {
    Converted c = convert(m, mode);
    store.drop_source_pages(*m.weight);  // before replace() retires the tensor it points to
    const std::string name = c.tensor.name;
    store.replace(std::move(c.tensor), c.values);
    store.add_keep_alive(c.scales, name);
    store.add_keep_alive(c.mins, name);
  }
  return static_cast<int>(matrices.size());
}

void quantize_fp8_blocks(const float* w, int64_t rows, int64_t cols, int64_t block_rows,
                         int64_t block_cols, uint8_t* q, float* scale_inv) {
  const int64_t grid_cols = ceil_div(cols, block_cols);
  for (int64_t r0 = 0; r0 < rows; r0 += block_rows) {
    const int64_t r1 = std::min(rows, r0 + block_rows);
    for (int64_t c0 = 0; c0 < cols; c0 += block_cols) {
      const int64_t c1 = std::min(cols, c0 + block_cols);
      float absmax = 0.0f;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) absmax = std::max(absmax, std::fabs(w[r * cols + c]));
      const float scale = absmax > 0.0f ? absmax / kE4m3Max : 1.0f;
      scale_inv[(r0 / block_rows) * grid_cols + c0 / block_cols] = scale;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) q[r * cols + c] = f32_to_e4m3(w[r * cols + c] / scale);
    }
  }
}

}  // namespace pagoda
