#include "model/layers/gated_mlp.h"

#include "kernels/ops.h"

namespace pagoda {

GatedMlp GatedMlp::load(WeightLoader& loader, const std::string& prefix, int64_t hidden,
                        int64_t inter, bool with_bias) {
  GatedMlp m;
  m.gate = Linear::load(loader, prefix + "gate_proj", inter, hidden, with_bias);
  m.up = Linear::load(loader, prefix + "up_proj", inter, hidden, with_bias);
  m.down = Linear::load(loader, prefix + "down_proj", hidden, inter, with_bias);
  return m;
}

void GatedMlp::forward(const ExecutionContext& ctx, const float* x, int64_t num_tokens,
                       float* gate_buf, float* up_buf, float* out) const {
  const int64_t inter = intermediate_size();
  const LinearCall gate_up[] = {{&gate, x, num_tokens, gate_buf, inter},
                                {&up, x, num_tokens, up_buf, inter}};
  linear_batch(ctx, gate_up);  // [T, inter] each
  ops::silu_mul(ctx.kernels(), gate_buf, up_buf, num_tokens * inter, gate_buf);
  down.forward(ctx, gate_buf, num_tokens, out);  // [T, hidden]
}

}  // namespace pagoda
