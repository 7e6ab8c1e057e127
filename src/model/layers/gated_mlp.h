// The SwiGLU feed-forward block of Llama-style decoders (Shazeer 2020, "GLU Variants Improve
// Transformer"): down(silu(gate(x)) * up(x)), with optional biases (Llama's mlp_bias).
#pragma once

#include <cstdint>
#include <string>

#include "device/execution_context.h"
#include "model/layers/linear.h"
#include "model/tensor_parallel.h"

namespace pagoda {

class WeightLoader;

struct GatedMlp {
  Linear gate;  // [inter, hidden]
  Linear up;    // [inter, hidden]
  Linear down;  // [hidden, inter]
  // Tensor parallel: gate/up hold this rank's intermediate rows (column-parallel), down the same
  // columns (row-parallel), and its output is summed over this group. nullptr on one rank.
  Communicator* reduce = nullptr;

  // `<prefix>gate_proj`, `<prefix>up_proj`, `<prefix>down_proj` (.weight, and .bias with_bias).
  static GatedMlp load(WeightLoader& loader, const std::string& prefix, int64_t hidden,
                       int64_t inter, bool with_bias = false);

  // The same, this rank's shard of the intermediate dimension (the whole of it on one rank).
  // Throws Error when `inter` does not split over the group or its quantization groups.
  static GatedMlp load_sharded(WeightLoader& loader, const std::string& prefix, int64_t hidden,
                               int64_t inter, const TensorParallel& tp, bool with_bias = false);

  int64_t intermediate_size() const { return gate.out_features(); }

  // out [T, hidden] from x [T, hidden]; gate_buf and up_buf [T, inter] are scratch.
  void forward(const ExecutionContext& ctx, const float* x, int64_t num_tokens, float* gate_buf,
               float* up_buf, float* out) const;
};

}  // namespace pagoda
