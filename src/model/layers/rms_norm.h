// RMSNorm (Zhang & Sennrich 2019; HF LlamaRMSNorm): out = x / sqrt(mean(x^2) + eps) * weight,
// row by row, alone or fused with the residual add that precedes it in a decoder layer.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "device/execution_context.h"

namespace pagoda {

class WeightLoader;

struct RmsNorm {
  std::span<const float> weight;  // [n], widened to fp32 at load (the loader holds it)
  float eps = 1e-6f;

  static RmsNorm load(WeightLoader& loader, const std::string& name, int64_t n, float eps);

  int64_t size() const { return static_cast<int64_t>(weight.size()); }

  // out[i, :] = norm(x[i, :]) for num_rows rows of size() values (out may be x).
  void forward(const ExecutionContext& ctx, const float* x, int64_t num_rows, float* out) const;
  // residual[i, :] += x[i, :]; out[i, :] = norm(residual[i, :]).
  void add_forward(const ExecutionContext& ctx, float* residual, const float* x, int64_t num_rows,
                   float* out) const;
  // One row on the calling thread (inside a parallel loop, or a few scattered rows).
  void forward_row(const ExecutionContext& ctx, const float* x, float* out) const;
};

}  // namespace pagoda
