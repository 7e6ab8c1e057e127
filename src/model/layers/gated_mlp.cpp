#include "model/layers/gated_mlp.h"

#include "kernels/ops.h"
#include "model/layers/row_parallel_linear.h"

namespace pagoda {

GatedMlp GatedMlp::load(WeightLoader& loader, const std::string& prefix, int64_t hidden,
                        int64_t inter, bool with_bias) {
  GatedMlp m;
  m.gate = Linear::load(loader, prefix + "gate_proj", inter, hidden, with_bias);
  m.up = Linear::load(loader, prefix + "up_proj", inter, hidden, with_bias);
  m.down = Linear::load(loader, prefix + "down_proj", hidden, inter, with_bias);
  return m;
}

GatedMlp GatedMlp::load_sharded(WeightLoader& loader, const std::string& prefix, int64_t hidden,
                                int64_t inter, const TensorParallel& tp, bool with_bias) {
  if (!tp.enabled()) return load(loader, prefix, hidden, inter, with_bias);
  const DimShard shard = tp.even_split(inter, "intermediate rows (intermediate_size)");
  GatedMlp m;
  m.gate = Linear::load_rows(loader, prefix + "gate_proj", inter, hidden, shard, with_bias);
  m.up = Linear::load_rows(loader, prefix + "up_proj", inter, hidden, shard, with_bias);
  RowParallelLinear down =
      RowParallelLinear::load(loader, prefix + "down_proj", hidden, inter, tp, with_bias);
  m.down = std::move(down.local);
  m.reduce = down.reduce;
  return m;
}

void GatedMlp::forward(const ExecutionContext& ctx, const float* x, int64_t num_tokens,
                       float* gate_buf, float* up_buf, float* out) const {
  const int64_t inter = intermediate_size();
  const LinearCall gate_up[] = {{&gate, x, num_tokens, gate_buf, inter},
                                {&up, x, num_tokens, up_buf, inter}};
  linear_batch(ctx, gate_up);  // [T, inter] each
  ops::silu_mul(ctx.kernels(), gate_buf, up_buf, num_tokens * inter, gate_buf);
  down.forward(ctx, gate_buf, num_tokens, out);  // [T, hidden], this rank's part
  reduce_partial_sums(reduce, out, num_tokens, down.out_features());
}

}  // namespace pagoda
