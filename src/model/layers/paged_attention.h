// Multi-head attention with grouped KV heads (GQA; MHA when the counts match) over the paged KV
// cache: rope is applied to q in place and to k on its way into the cache, v is written beside
// it, and every new token attends causally to its sequence's cache (kernels/attention.h).
#pragma once

#include <cstdint>

#include "device/execution_context.h"
#include "kernels/attention.h"
#include "model/layers/attention_batch.h"

namespace pagoda {

struct PagedAttention {
  int32_t num_heads = 0;  // query heads; the cache layer says how many KV heads
  float scale = 1.0f;     // softmax scale, 1/sqrt(head_dim) for Llama

  // q [T, num_heads, head_dim] (rotated in place), k and v [T, num_kv_heads, head_dim] into
  // `cache`; out [T, num_heads, v_head_dim].
  void forward(const ExecutionContext& ctx, const RopeRows& rope, float* q, const float* k,
               const float* v, const PagedKvLayer& cache, const AttentionBatch& batch,
               float* out) const;
};

}  // namespace pagoda
