#include "model/layers/row_parallel_linear.h"

#include "model/weights.h"

namespace pagoda {

RowParallelLinear RowParallelLinear::load(WeightLoader& loader, const std::string& prefix,
                                          int64_t rows, int64_t cols, const TensorParallel& tp,
                                          bool with_bias) {
  RowParallelLinear l;
  if (!tp.enabled()) {
    l.local = Linear::load(loader, prefix, rows, cols, with_bias);
    return l;
  }
  const DimShard shard = tp.even_split(cols, (prefix + " input columns").c_str());
  l.local.weight = loader.matrix_columns(prefix + ".weight", rows, cols, shard.first, shard.count);
  // The bias belongs to the sum, not to each part: one rank adds it.
  if (with_bias && tp.rank() == 0) l.local.bias = loader.vector(prefix + ".bias", rows);
  l.reduce = tp.reducer();
  return l;
}

void RowParallelLinear::forward(const ExecutionContext& ctx, const float* x, int64_t num_tokens,
                                float* y) const {
  local.forward(ctx, x, num_tokens, y);
  reduce_partial_sums(reduce, y, num_tokens, out_features());
}

void reduce_partial_sums(Communicator* reduce, float* y, int64_t num_tokens, int64_t n) {
  if (reduce == nullptr) return;
  reduce->all_reduce_sum(y, static_cast<size_t>(num_tokens * n), DType::kF32);
}

}  // namespace pagoda
