// Binding stored tensors to what the forward pass computes with: matrices stay in their
// stored dtype and are used in place (memory-mapped); small vectors (norms, biases) are
// widened to fp32 once at load.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/kernels.h"

namespace pagoda {

class TensorStore;

// A [rows, cols] matrix from the store, checked against the expected shape.
WeightView load_matrix(const TensorStore& store, const std::string& name, int64_t rows,
                       int64_t cols);
// A [n] vector widened to fp32.
std::vector<float> load_vector(const TensorStore& store, const std::string& name, int64_t n);

inline int64_t weight_view_bytes(const WeightView& w) {
  return w.rows * w.cols * dtype_size(w.dtype);
}

}  // namespace pagoda
