#include "model/weights.h"

#include "kernels/kernels.h"
#include "loader/safetensors.h"

namespace pagoda {

WeightView load_matrix(const TensorStore& store, const std::string& name, int64_t rows,
                       int64_t cols) {
  const Tensor& t = store.get(name, {rows, cols});
  WeightView w;
  w.data = t.data;
  w.dtype = t.dtype;
  w.rows = rows;
  w.cols = cols;
  return w;
}

std::vector<float> load_vector(const TensorStore& store, const std::string& name, int64_t n) {
  const Tensor& t = store.get(name, {n});
  std::vector<float> out(static_cast<size_t>(n));
  kernels().to_f32(t.data, t.dtype, n, out.data());
  return out;
}

}  // namespace pagoda
