#include "model/layers/linear.h"

#include <algorithm>

#include "kernels/ops.h"
#include "model/weights.h"

namespace pagoda {
namespace {

// y[t, :out] += bias for every token. One pass on the calling thread: the bias adds are a
// rounding error beside the matmul they follow.
void add_bias(std::span<const float> bias, int64_t num_tokens, float* y, int64_t ldy) {
  if (bias.empty()) return;
  const auto n = static_cast<int64_t>(bias.size());
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t i = 0; i < n; ++i) y[t * ldy + i] += bias[static_cast<size_t>(i)];
  }
}

}  // namespace

Linear Linear::load(WeightLoader& loader, const std::string& prefix, int64_t rows, int64_t cols,
                    bool with_bias) {
  Linear l;
  l.weight = loader.matrix(prefix + ".weight", rows, cols);
  if (with_bias) l.bias = loader.vector(prefix + ".bias", rows);
  return l;
}

Linear Linear::load_rows(WeightLoader& loader, const std::string& prefix, int64_t rows,
                         int64_t cols, DimShard shard, bool with_bias) {
  if (shard.first == 0 && shard.count == rows) return load(loader, prefix, rows, cols, with_bias);
  Linear l;
  l.weight = loader.matrix_rows(prefix + ".weight", rows, cols, shard.first, shard.count);
  if (with_bias) l.bias = loader.vector_range(prefix + ".bias", rows, shard.first, shard.count);
  return l;
}

void Linear::forward(const ExecutionContext& ctx, const float* x, int64_t num_tokens, float* y,
                     int64_t ldy) const {
  ops::matmul(ctx.kernels(), x, num_tokens, weight, y, ldy);
  add_bias(bias, num_tokens, y, ldy);
}

void linear_batch(const ExecutionContext& ctx, std::span<const LinearCall> calls) {
  constexpr size_t kMaxCalls = 8;  // q/k/v, gate/up: a handful, on the stack
  ops::MatmulJob jobs[kMaxCalls];
  for (size_t first = 0; first < calls.size(); first += kMaxCalls) {
    const size_t n = std::min(kMaxCalls, calls.size() - first);
    for (size_t i = 0; i < n; ++i) {
      const LinearCall& c = calls[first + i];
      jobs[i] = {c.x, c.num_tokens, &c.linear->weight, c.y, c.ldy};
    }
    ops::matmul_batch(ctx.kernels(), std::span<const ops::MatmulJob>(jobs, n));
  }
  for (const LinearCall& c : calls) add_bias(c.linear->bias, c.num_tokens, c.y, c.ldy);
}

}  // namespace pagoda
