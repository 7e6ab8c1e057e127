#include "model/layers/paged_attention.h"

namespace pagoda {

void PagedAttention::forward(const ExecutionContext& ctx, const RopeRows& rope, float* q,
                             const float* k, const float* v, const PagedKvLayer& cache,
                             const AttentionBatch& batch, float* out) const {
  write_kv_rope(ctx.kernels(), cache, rope, q, num_heads, k, v, batch.slot_mapping(),
                batch.num_tokens());
  paged_attention(ctx.kernels(), q, num_heads, cache, batch.sequences(), batch.num_sequences(),
                  scale, out);
}

}  // namespace pagoda
