// Multi-head Latent Attention (DeepSeek-V2, arXiv:2405.04434 §2.1) over a paged latent cache,
// in the weight-absorbed form. Each cached token holds one vector shared by every head:
// [c_kv (kv_lora_rank, normalised) | k_pe (rope dims, rotated)] — 576 floats for V2-Lite and
// V3 — instead of per-head K and V. The model projects each head's q_nope through kv_b_proj's
// k part into the latent space beforehand, and up-projects the latent output through its v
// part afterwards; here only the attention itself happens:
//   score(t, h, j) = scale * dot(q[t, h, :], cache[j, :])          (latent and rope at once)
//   out[t, h, :]   = sum_j softmax_j(score) * cache[j, :kv_lora_rank]
// The cache is a PagedKvLayer with num_kv_heads 1, k_head_dim = latent dim, v_head_dim 0,
// read through the same per-sequence block tables and AttentionSequence ranges as the dense
// paged attention, so chunked prefill, prefix caching and batching behave identically.
#pragma once

#include <cstdint>

#include "kernels/attention.h"

namespace pagoda {

// Writes latent rows [num_tokens, cache.k_head_dim] into their slots (negative = skipped).
void write_latent(const PagedKvLayer& cache, const float* latent, const int64_t* slot_mapping,
                  int64_t num_tokens);

// q: [total_tokens, num_heads, cache.k_head_dim] absorbed queries (q_nope·W_uk | rotated q_pe);
// out: [total_tokens, num_heads, kv_lora_rank]. Causal as in paged_attention. Parallel over
// (token, group of heads); the heads of a group share every cache row they read, and the
// groups are made as large as the thread count allows (all heads share one latent row).
void mla_attention(const float* q, int32_t num_heads, int32_t kv_lora_rank,
                   const PagedKvLayer& cache, const AttentionSequence* seqs, int32_t num_seqs,
                   float scale, float* out);

// The two kernels above on an explicit kernel table (the execution context's).
struct KernelTable;
void write_latent(const KernelTable& kt, const PagedKvLayer& cache, const float* latent,
                  const int64_t* slot_mapping, int64_t num_tokens);
void mla_attention(const KernelTable& kt, const float* q, int32_t num_heads, int32_t kv_lora_rank,
                   const PagedKvLayer& cache, const AttentionSequence* seqs, int32_t num_seqs,
                   float scale, float* out);

// The plain reference for one sequence over a contiguous latent cache [context_len,
// latent_dim]; q and out hold its num_tokens new tokens (the last positions). Full score row,
// two-pass softmax, double accumulation.
void mla_attention_reference(const float* q, int32_t num_tokens, int32_t num_heads,
                             const float* latent_cache, int32_t context_len, int32_t latent_dim,
                             int32_t kv_lora_rank, float scale, float* out);

}  // namespace pagoda
