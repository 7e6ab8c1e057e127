#include "model/layers/rms_norm.h"

#include "kernels/kernels.h"
#include "kernels/ops.h"
#include "model/weights.h"

namespace pagoda {

RmsNorm RmsNorm::load(WeightLoader& loader, const std::string& name, int64_t n, float eps) {
  return RmsNorm{loader.vector(name, n), eps};
}

void RmsNorm::forward(const ExecutionContext& ctx, const float* x, int64_t num_rows,
                      float* out) const {
  ops::rms_norm_rows(ctx.kernels(), x, weight.data(), eps, num_rows, size(), out);
}

void RmsNorm::add_forward(const ExecutionContext& ctx, float* residual, const float* x,
                          int64_t num_rows, float* out) const {
  ops::add_rms_norm_rows(ctx.kernels(), residual, x, weight.data(), eps, num_rows, size(), out);
}

void RmsNorm::forward_row(const ExecutionContext& ctx, const float* x, float* out) const {
  ctx.kernels().rms_norm(x, weight.data(), eps, size(), out);
}

}  // namespace pagoda
