// A row-parallel linear (Megatron-LM's RowParallelLinear): the weight [out, in] is split along
// `in`, each rank multiplies its slice of the input (the heads or intermediate rows a
// column-parallel layer before it produced) and the partial outputs are summed over the ranks.
// With one rank it is a plain Linear and communicates nothing.
#pragma once

#include <cstdint>
#include <string>

#include "device/execution_context.h"
#include "model/layers/linear.h"
#include "model/tensor_parallel.h"

namespace pagoda {

class WeightLoader;

struct RowParallelLinear {
  Linear local;                    // [out_features, this rank's in_features]
  Communicator* reduce = nullptr;  // sums the partial outputs; nullptr on one rank

  // `<prefix>.weight` [rows, cols], this rank's columns; the bias (added once, on rank 0,
  // before the sum) when `with_bias`. Throws Error when `cols` does not split.
  static RowParallelLinear load(WeightLoader& loader, const std::string& prefix, int64_t rows,
                                int64_t cols, const TensorParallel& tp, bool with_bias = false);

  int64_t out_features() const { return local.out_features(); }

  // x [num_tokens, this rank's in_features] -> y [num_tokens, out_features], the full sum.
  void forward(const ExecutionContext& ctx, const float* x, int64_t num_tokens, float* y) const;
};

// y [num_tokens, n] summed over the ranks of `reduce` (nothing when it is nullptr).
void reduce_partial_sums(Communicator* reduce, float* y, int64_t num_tokens, int64_t n);

}  // namespace pagoda
