#include "model/weights.h"

#include "kernels/quantize.h"
#include "loader/safetensors.h"
#include "util/error.h"

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

WeightView WeightLoader::prepare(const WeightView& stored, const std::string& name) {
  const DType to = options_.quantize_to;
  if (!is_quantized(to) || is_quantized(stored.dtype)) return stored;
  const int64_t group =
      options_.group_size > 0 ? options_.group_size : default_group_size(to, stored.cols);
  // Kernels work on runs of 32 values: a matrix whose rows do not split into whole groups
  // (e.g. stories260K's 172-wide MLP) stays in its float type, as llama.cpp falls back too.
  if (stored.cols % group != 0 || group % 32 != 0) {
    ++num_kept_float_;
    return stored;
  }
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
