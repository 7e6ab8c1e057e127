// A linear layer, y = x W^T (+ b), over every weight format the loader produces: fp32, fp16 and
// bf16 used in place, int8 / int4 quantized at load or stored so (pagoda quantize checkpoints,
// AWQ/GPTQ, GGUF repacks), with or without int8 activations. The format is carried by the
// WeightView; which kernel runs it is the execution context's kernel table's business.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "device/execution_context.h"
#include "kernels/kernels.h"
#include "model/tensor_parallel.h"

namespace pagoda {

class WeightLoader;

struct Linear {
  WeightView weight;            // [out_features, in_features]
  std::span<const float> bias;  // [out_features] (the loader holds it), or empty

  // `<prefix>.weight` [rows, cols] (quantized per the loader's options), and `<prefix>.bias`
  // [rows] when `with_bias`.
  static Linear load(WeightLoader& loader, const std::string& prefix, int64_t rows, int64_t cols,
                     bool with_bias = false);
  // Column-parallel: this rank's output rows `shard` of the [rows, cols] weight (and bias). Its
  // outputs are this rank's part of y and need no communication.
  static Linear load_rows(WeightLoader& loader, const std::string& prefix, int64_t rows,
                          int64_t cols, DimShard shard, bool with_bias = false);

  int64_t out_features() const { return weight.rows; }
  int64_t in_features() const { return weight.cols; }

  // x [num_tokens, in_features] -> y [num_tokens, ldy], ldy >= out_features (several
  // projections may write side by side into one buffer).
  void forward(const ExecutionContext& ctx, const float* x, int64_t num_tokens, float* y,
               int64_t ldy) const;
  void forward(const ExecutionContext& ctx, const float* x, int64_t num_tokens, float* y) const {
    forward(ctx, x, num_tokens, y, weight.rows);
  }
};

// One projection of a linear_batch call.
struct LinearCall {
  const Linear* linear;
  const float* x;  // [num_tokens, in_features]
  int64_t num_tokens;
  float* y;  // [num_tokens, ldy]
  int64_t ldy;
};

// Independent projections (q/k/v, gate/up) in one parallel region: the results of one forward
// call each, with one fork/join instead of one per projection.
void linear_batch(const ExecutionContext& ctx, std::span<const LinearCall> calls);

}  // namespace pagoda
