#include "model/weights.h"

#include <cstring>

#include <spdlog/spdlog.h>

#include "kernels/quantize.h"
#include "loader/safetensors.h"
#include "util/error.h"
#include "util/half.h"

namespace pagoda {

WeightView weight_rows(const WeightView& w, int64_t first, int64_t count) {
  WeightView r = w;
  r.rows = count;
  r.data = static_cast<const uint8_t*>(w.data) + first * dtype_row_bytes(w.dtype, w.cols);
  if (w.group_size > 0) {
    const int64_t groups = w.cols / w.group_size;
    if (w.scales) r.scales = w.scales + first * groups;
    if (w.mins) r.mins = w.mins + first * groups;
  }
  return r;
}

WeightView slice_columns(const WeightView& w, int64_t first, int64_t count, const std::string& name,
                         std::vector<std::shared_ptr<const void>>& owned) {
  if (first < 0 || count <= 0 || first + count > w.cols)
    fail("{}: columns [{}, {}) are outside its {} columns", name, first, first + count, w.cols);
  const int64_t value_bytes = dtype_row_bytes(w.dtype, count);
  auto values = std::shared_ptr<uint8_t[]>(new uint8_t[static_cast<size_t>(w.rows * value_bytes)]);
  const auto* src = static_cast<const uint8_t*>(w.data);
  const int64_t src_row_bytes = dtype_row_bytes(w.dtype, w.cols);
  const int64_t first_byte = dtype_row_bytes(w.dtype, first);
  WeightView out = w;
  out.cols = count;
  out.data = values.get();
  if (is_quantized(w.dtype)) {
    const int64_t g = w.group_size;
    const bool runs = first % 32 == 0 && count % 32 == 0;
    const bool whole_groups = count % g == 0 && first % g == 0;
    const bool part_of_group = g % count == 0 && first / g == (first + count - 1) / g;
    if (!runs || !(whole_groups || part_of_group)) {
      fail(
          "{}: a tensor-parallel shard of columns [{}, {}) does not fall on its quantization "
          "groups of {} columns (each shard needs a multiple of 32 columns and whole groups, or a "
          "part of one group); use another --tensor-parallel-size or group size",
          name, first, first + count, g);
    }
    const int64_t src_groups = w.cols / g;
    const int64_t groups = whole_groups ? count / g : 1;
    out.group_size = whole_groups ? g : count;
    auto copy_plane = [&](const uint16_t* plane) -> const uint16_t* {
      if (plane == nullptr) return nullptr;
      auto dst = std::shared_ptr<uint16_t[]>(new uint16_t[static_cast<size_t>(w.rows * groups)]);
      for (int64_t r = 0; r < w.rows; ++r) {
        std::memcpy(dst.get() + r * groups, plane + r * src_groups + first / g,
                    static_cast<size_t>(groups) * sizeof(uint16_t));
      }
      owned.push_back(dst);
      return dst.get();
    };
    out.scales = copy_plane(w.scales);
    out.mins = copy_plane(w.mins);
  }
  for (int64_t r = 0; r < w.rows; ++r) {
    std::memcpy(values.get() + r * value_bytes, src + r * src_row_bytes + first_byte,
                static_cast<size_t>(value_bytes));
  }
  owned.push_back(values);
  return out;
}

DType parse_quantization(const std::string& name) {
  if (name == "int8") return DType::kI8;
  if (name == "int4") return DType::kI4;
  if (name.empty() || name == "none") return DType::kF32;
  fail("unknown quantization '{}': expected int8 or int4", name);
}

int64_t default_group_size(DType quantize_to, int64_t cols) {
  // int8 keeps one scale per output channel (vLLM's W8A8 convention); int4 needs small groups
  // to stay accurate (32, as GGUF's Q4_0 and Q4_K sub-blocks).
  return quantize_to == DType::kI8 ? cols : 32;
}

WeightLoader::WeightLoader(const TensorStore& store, const WeightOptions& options)
    : store_(store), options_(options) {}

WeightView WeightLoader::view_of(const std::string& name, int64_t rows, int64_t cols) const {
  const Tensor& t = store_.get(name, {rows, cols});
  WeightView w;
  w.data = t.data;
  w.dtype = t.dtype;
  w.rows = rows;
  w.cols = cols;
  w.scales = t.scales;
  w.mins = t.mins;
  w.group_size = t.group_size;
  w.int8_activations = is_quantized(t.dtype) && options_.int8_activations;
  w.symmetric_int4 = symmetric_int4_mins(w);
  return w;
}

WeightView WeightLoader::matrix_as_stored(const std::string& name, int64_t rows, int64_t cols) {
  const WeightView w = view_of(name, rows, cols);
  num_parameters_ += rows * cols;
  weight_bytes_ += pagoda::weight_bytes(w);
  return w;
}

WeightView WeightLoader::matrix(const std::string& name, int64_t rows, int64_t cols) {
  const WeightView w = view_of(name, rows, cols);
  num_parameters_ += rows * cols;
  const WeightView out = prepare(w, name);
  if (out.data == w.data) {
    weight_bytes_ += pagoda::weight_bytes(w);
  } else {
    store_.drop_source_pages(store_.get(name));  // prepare counted the copy; the source is done
  }
  return out;
}

int64_t WeightLoader::load_group_size(const WeightView& stored) {
  const DType to = options_.quantize_to;
  if (!is_quantized(to) || is_quantized(stored.dtype)) return 0;
  const int64_t group =
      options_.group_size > 0 ? options_.group_size : default_group_size(to, stored.cols);
  // Kernels work on runs of 32 values: a matrix whose rows do not split into whole groups
  // (e.g. stories260K's 172-wide MLP) stays in its float type, as llama.cpp falls back too.
  if (stored.cols % group != 0 || group % 32 != 0) {
    ++num_kept_float_;
    return 0;
  }
  return group;
}

WeightView WeightLoader::f16_for_kernels(const WeightView& stored, const std::string& name) {
  const KernelTable& k = options_.kernels != nullptr ? *options_.kernels : kernels();
  if (!k.f16_arithmetic) return stored;
  // One pass over the bits (NaN and inf count as large): the pages are read at the first
  // forward anyway, and a model whose weights all fit pays nothing else.
  const uint16_t max_bits = f32_to_f16(kF16ArithmeticMaxWeight);
  const auto* h = static_cast<const f16_t*>(stored.data);
  const int64_t n = stored.rows * stored.cols;
  int64_t large = 0;
  for (int64_t i = 0; i < n; ++i) large += (h[i] & 0x7fffu) > max_bits;
  if (large == 0) return stored;
  spdlog::warn(
      "{}: {} of its f16 weights exceed {} in magnitude, which the {} kernels' fp16 "
      "products could overflow; using an fp32 copy",
      name, large, kF16ArithmeticMaxWeight, k.isa);
  auto wide = std::shared_ptr<float[]>(new float[static_cast<size_t>(n)]);
  k.to_f32(stored.data, DType::kF16, n, wide.get());
  owned_.push_back(wide);
  WeightView out = stored;
  out.data = wide.get();
  out.dtype = DType::kF32;
  weight_bytes_ += pagoda::weight_bytes(out);
  return out;
}

WeightView WeightLoader::prepare(const WeightView& stored, const std::string& name) {
  const int64_t group = load_group_size(stored);
  if (group == 0) return stored.dtype == DType::kF16 ? f16_for_kernels(stored, name) : stored;
  const DType to = options_.quantize_to;
  QuantizedMatrix q = quantize_matrix(stored, to, group);
  if (options_.progress != nullptr)
    options_.progress->advance(static_cast<uint64_t>(pagoda::weight_bytes(stored)));
  q.view.int8_activations = options_.int8_activations;
  owned_.push_back(q.values);
  owned_.push_back(q.scales);
  if (q.mins) owned_.push_back(q.mins);
  weight_bytes_ += q.size_bytes;
  if (options_.on_quantized) options_.on_quantized(name, q.view);
  return q.view;
}

WeightView WeightLoader::matrix_rows(const std::string& name, int64_t rows, int64_t cols,
                                     int64_t first, int64_t count) {
  if (first < 0 || count <= 0 || first + count > rows)
    fail("{}: rows [{}, {}) are outside its {} rows", name, first, first + count, rows);
  const WeightView w = weight_rows(view_of(name, rows, cols), first, count);
  num_parameters_ += count * cols;
  const WeightView out = prepare(w, name);
  if (out.data == w.data) weight_bytes_ += pagoda::weight_bytes(w);  // else prepare counted it
  return out;
}

WeightView WeightLoader::matrix_rows_as_stored(const std::string& name, int64_t rows, int64_t cols,
                                               int64_t first, int64_t count) {
  if (first < 0 || count <= 0 || first + count > rows)
    fail("{}: rows [{}, {}) are outside its {} rows", name, first, first + count, rows);
  const WeightView w = weight_rows(view_of(name, rows, cols), first, count);
  num_parameters_ += count * cols;
  weight_bytes_ += pagoda::weight_bytes(w);
  return w;
}

WeightView WeightLoader::matrix_columns(const std::string& name, int64_t rows, int64_t cols,
                                        int64_t first, int64_t count) {
  const WeightView stored = view_of(name, rows, cols);
  num_parameters_ += rows * count;
  WeightView source = stored;
  QuantizedMatrix whole;  // the whole matrix quantized, dropped once its columns are copied
  if (const int64_t group = load_group_size(stored); group > 0) {
    whole = quantize_matrix(stored, options_.quantize_to, group);
    whole.view.int8_activations = options_.int8_activations;
    source = whole.view;
  }
  const WeightView out = slice_columns(source, first, count, name, owned_);
  weight_bytes_ += pagoda::weight_bytes(out);
  return out;
}

std::vector<float> WeightLoader::vector_range(const std::string& name, int64_t n, int64_t first,
                                              int64_t count) {
  std::vector<float> all = vector(name, n);
  num_parameters_ -= n - count;
  weight_bytes_ -= (n - count) * static_cast<int64_t>(sizeof(float));
  return {all.begin() + first, all.begin() + first + count};
}

std::vector<float> WeightLoader::vector(const std::string& name, int64_t n) {
  const Tensor& t = store_.get(name, {n});
  if (is_quantized(t.dtype))
    fail("{}: vector {} is quantized; expected a float type", t.path, name);
  std::vector<float> out(static_cast<size_t>(n));
  kernels().to_f32(t.data, t.dtype, n, out.data());
  num_parameters_ += n;
  weight_bytes_ += n * static_cast<int64_t>(sizeof(float));
  return out;
}

}  // namespace pagoda
