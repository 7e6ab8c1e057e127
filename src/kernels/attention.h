// Paged attention over a flattened batch (vLLM v1: no separate prefill and decode phases):
// every sequence contributes a run of new tokens (1 for decode, a chunk for prefill), and each
// new token attends causally to everything in the cache up to and including itself. The cache
// is read through per-sequence block tables, so sequences never need contiguous memory.
// Each kernel also comes with a `const KernelTable&` first (kernels/kernels.h), for the
// execution context's table; the forms without one use the process-wide kernels().
#pragma once

#include <cstdint>

#include "util/dtype.h"

namespace pagoda {

// One layer of the paged KV cache. Layout of k and v: [num_blocks, num_kv_heads, block_size,
// head_dim] (v uses v_head_dim), elements of `dtype`: kF32, or kF16 / kBF16 (half the bytes
// to store and to stream per step; values are rounded once, when written, and widened
// exactly when read). Token slot s lives at block s / block_size, offset s % block_size.
// Heads are outside the slots (vLLM's CPU layout is head-major within a block too), so one
// head's rows of a block are one contiguous run that attention streams in order, where slots
// outside heads would scatter them a whole slot apart (8 KiB, two pages, at DeepSeek-Coder's
// 16 heads x 128 in fp32).
struct PagedKvLayer {
  void* k = nullptr;
  void* v = nullptr;
  int32_t block_size = 0;
  int32_t num_kv_heads = 0;
  int32_t k_head_dim = 0;
  int32_t v_head_dim = 0;
  DType dtype = DType::kF32;

  // Element index of the row of (slot, kv head) in k (k_index) or v (v_index).
  int64_t k_index(int64_t slot, int64_t head) const { return row_index(slot, head) * k_head_dim; }
  int64_t v_index(int64_t slot, int64_t head) const { return row_index(slot, head) * v_head_dim; }
  // Element `index` of k or v, as a byte address.
  char* k_at(int64_t index) const { return static_cast<char*>(k) + index * dtype_size(dtype); }
  char* v_at(int64_t index) const { return static_cast<char*>(v) + index * dtype_size(dtype); }

 private:
  int64_t row_index(int64_t slot, int64_t head) const {
    return (slot / block_size * num_kv_heads + head) * block_size + slot % block_size;
  }
};

// Writes the new tokens' k [num_tokens, num_kv_heads, k_head_dim] and v [num_tokens,
// num_kv_heads, v_head_dim] into their slots, narrowed to the cache dtype. A negative slot
// (padding) is skipped.
void write_kv(const PagedKvLayer& cache, const float* k, const float* v,
              const int64_t* slot_mapping, int64_t num_tokens);

// Per-token rotary cos/sin rows, rotary_dim / 2 values each: token i's start at
// cos + i * (rotary_dim / 2). A model fills them once per forward pass for every layer to share.
struct RopeRows {
  const float* cos = nullptr;
  const float* sin = nullptr;
  int32_t rotary_dim = 0;  // leading dims of each head that are rotated; the rest pass through
  bool neox = true;        // pairing, as in KernelTable::rope
};

// Rope fused into the cache write, one pass over each token: every k head is rotated straight
// into its slot instead of being rotated in place and then copied, v is copied as write_kv
// does, and q [num_tokens, num_q_heads, k_head_dim] is rotated in place while the token's
// cos/sin are hot. A 16-bit cache gets the rotated row rounded, as write_kv would round it.
// Bit-identical to KernelTable::rope on every q and k head, then write_kv. A negative slot
// (padding) gets nothing written, but its q is still rotated.
void write_kv_rope(const PagedKvLayer& cache, const RopeRows& rope, float* q, int32_t num_q_heads,
                   const float* k, const float* v, const int64_t* slot_mapping, int64_t num_tokens);

struct AttentionSequence {
  int32_t token_begin = 0;               // first row of this sequence's new tokens in q/out
  int32_t num_tokens = 0;                // new tokens this step (1 for decode, a chunk for prefill)
  int32_t context_len = 0;               // tokens in the cache after this step, new ones included
  const int32_t* block_table = nullptr;  // block ids covering [0, context_len)
};

// q: [total_tokens, num_heads, k_head_dim]; out: [total_tokens, num_heads, v_head_dim].
// New token i of a sequence sits at position context_len - num_tokens + i and attends causally
// to positions [0, that position]. GQA: head h uses kv head h / (num_heads / num_kv_heads).
// Parallel over (sequence, kv head, token) with OpenMP; softmax is computed online block by
// block (flash-attention style), so no buffer grows with the context length.
void paged_attention(const float* q, int32_t num_heads, const PagedKvLayer& cache,
                     const AttentionSequence* seqs, int32_t num_seqs, float scale, float* out);

struct KernelTable;
void write_kv(const KernelTable& kt, const PagedKvLayer& cache, const float* k, const float* v,
              const int64_t* slot_mapping, int64_t num_tokens);
void write_kv_rope(const KernelTable& kt, const PagedKvLayer& cache, const RopeRows& rope, float* q,
                   int32_t num_q_heads, const float* k, const float* v, const int64_t* slot_mapping,
                   int64_t num_tokens);
void paged_attention(const KernelTable& kt, const float* q, int32_t num_heads,
                     const PagedKvLayer& cache, const AttentionSequence* seqs, int32_t num_seqs,
                     float scale, float* out);

// The plain reference for one sequence with a contiguous cache: k [context_len, num_kv_heads,
// k_head_dim], v [context_len, num_kv_heads, v_head_dim]; q and out hold this sequence's
// num_tokens new tokens (the last num_tokens positions). Full score row, two-pass softmax,
// double accumulation: slow and obviously correct, for tests.
void paged_attention_reference(const float* q, int32_t num_tokens, int32_t num_heads,
                               const float* k, const float* v, int32_t context_len,
                               int32_t num_kv_heads, int32_t k_head_dim, int32_t v_head_dim,
                               float scale, float* out);

}  // namespace pagoda
