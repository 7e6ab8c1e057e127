// MLA attention over the paged latent cache: the blocked online-softmax kernel the model runs
// and the contiguous reference the tests compare it with. See mla_attention.h.
#include "kernels/mla_attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/kernels.h"

namespace pagoda {
namespace {

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

// Per-thread working memory, grown to the largest shape seen and then reused.
struct MlaScratch {
  std::vector<float> scores;  // [heads, block_size]
  std::vector<float> acc;     // [heads, kv_lora_rank] running weighted sum of latents
  std::vector<float> max;     // [heads]
  std::vector<float> sum;     // [heads]
};

struct MlaShape {
  int32_t num_heads;
  int32_t kv_lora_rank;
  int32_t latent_dim;
  float scale;
};

// Heads [head_begin, head_begin + num_group) of one new token of one sequence. Each cache
// block (block_size latent rows) is scored and accumulated for every head of the group while
// it sits in L1/L2, with dot_rows / axpy_rows working on the whole block at once; the softmax
// is online per block (FlashAttention, algorithm 1).
void attend_group(const KernelTable& kt, const float* q, const PagedKvLayer& cache,
                  const AttentionSequence& seq, int32_t token, int32_t head_begin,
                  int32_t num_group, const MlaShape& shape, float* out, MlaScratch& s) {
  const int32_t bs = cache.block_size;
  const int32_t dl = shape.latent_dim, dr = shape.kv_lora_rank;
  const int64_t row = seq.token_begin + token;
  const int32_t num_positions = seq.context_len - seq.num_tokens + token + 1;
  const float* q_group = q + (row * shape.num_heads + head_begin) * dl;

  s.scores.resize(static_cast<size_t>(num_group) * bs);
  s.acc.assign(static_cast<size_t>(num_group) * dr, 0.0f);
  s.max.assign(static_cast<size_t>(num_group), kMinusInf);
  s.sum.assign(static_cast<size_t>(num_group), 0.0f);

  for (int32_t block_start = 0; block_start < num_positions; block_start += bs) {
    const int32_t block_len = std::min(bs, num_positions - block_start);
    // The block's first slot; its rows are contiguous (one kv head).
    const char* block =
        cache.k_at(cache.k_index(int64_t{seq.block_table[block_start / bs]} * bs, 0));
    for (int32_t g = 0; g < num_group; ++g) {
      float* scores = &s.scores[static_cast<size_t>(g) * bs];
      kt.dot_rows(q_group + int64_t{g} * dl, block, cache.dtype, dl, block_len, dl, scores);
      float block_max = kMinusInf;
      for (int32_t j = 0; j < block_len; ++j) {
        scores[j] *= shape.scale;
        block_max = std::max(block_max, scores[j]);
      }
      const float new_max = std::max(s.max[g], block_max);
      float* acc = &s.acc[static_cast<size_t>(g) * dr];
      if (new_max > s.max[g] && s.sum[g] > 0.0f) {
        const float correction = std::exp(s.max[g] - new_max);
        s.sum[g] *= correction;
        for (int32_t d = 0; d < dr; ++d) acc[d] *= correction;
      }
      s.max[g] = new_max;
      for (int32_t j = 0; j < block_len; ++j) {
        scores[j] = std::exp(scores[j] - new_max);
        s.sum[g] += scores[j];
      }
    }
    for (int32_t g = 0; g < num_group; ++g) {
      kt.axpy_rows(&s.scores[static_cast<size_t>(g) * bs], block, cache.dtype, dl, block_len, dr,
                   &s.acc[static_cast<size_t>(g) * dr]);
    }
  }
  for (int32_t g = 0; g < num_group; ++g) {
    float* o = out + (row * shape.num_heads + head_begin + g) * dr;
    const float inv_sum = 1.0f / s.sum[g];
    const float* acc = &s.acc[static_cast<size_t>(g) * dr];
    for (int32_t d = 0; d < dr; ++d) o[d] = acc[d] * inv_sum;
  }
}

}  // namespace

void write_latent(const KernelTable& kt, const PagedKvLayer& cache, const float* latent,
                  const int64_t* slot_mapping, int64_t num_tokens) {
  const int64_t row = int64_t{cache.num_kv_heads} * cache.k_head_dim;
  for (int64_t i = 0; i < num_tokens; ++i) {
    const int64_t slot = slot_mapping[i];
    if (slot < 0) continue;
    kt.from_f32(latent + i * row, cache.dtype, row, cache.k_at(cache.k_index(slot, 0)));
  }
}

void mla_attention(const KernelTable& kt, const float* q, int32_t num_heads, int32_t kv_lora_rank,
                   const PagedKvLayer& cache, const AttentionSequence* seqs, int32_t num_seqs,
                   float scale, float* out) {
  const MlaShape shape{num_heads, kv_lora_rank, cache.k_head_dim, scale};
  static thread_local std::vector<int64_t> token_begin;  // first token item of each sequence
  token_begin.resize(static_cast<size_t>(num_seqs) + 1);
  token_begin[0] = 0;
  for (int32_t i = 0; i < num_seqs; ++i) token_begin[i + 1] = token_begin[i] + seqs[i].num_tokens;
  const int64_t num_token_items = token_begin[static_cast<size_t>(num_seqs)];
  if (num_token_items == 0) return;

  // All heads of a token share each latent row, so one item per token reads the cache once.
  // Split the heads only as far as needed to give every thread work (decode at small batch).
  const int64_t num_threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const int64_t wanted_chunks = (num_threads + num_token_items - 1) / num_token_items;
  const int32_t num_chunks = static_cast<int32_t>(std::clamp<int64_t>(wanted_chunks, 1, num_heads));
  const int32_t heads_per_item = (num_heads + num_chunks - 1) / num_chunks;
  const int32_t items_per_token = (num_heads + heads_per_item - 1) / heads_per_item;
  const int64_t num_items = num_token_items * items_per_token;
  const int64_t* begins = token_begin.data();

#pragma omp parallel for schedule(dynamic, 1) if (num_items > 1 && !omp_in_parallel())
  for (int64_t item = 0; item < num_items; ++item) {
    static thread_local MlaScratch scratch;
    const int64_t token_item = item / items_per_token;
    const int32_t head_begin = static_cast<int32_t>(item % items_per_token) * heads_per_item;
    const int32_t seq = static_cast<int32_t>(
        std::upper_bound(begins, begins + num_seqs + 1, token_item) - begins - 1);
    const int32_t token = static_cast<int32_t>(token_item - begins[seq]);
    attend_group(kt, q, cache, seqs[seq], token, head_begin,
                 std::min(heads_per_item, num_heads - head_begin), shape, out, scratch);
  }
}

void mla_attention_reference(const float* q, int32_t num_tokens, int32_t num_heads,
                             const float* latent_cache, int32_t context_len, int32_t latent_dim,
                             int32_t kv_lora_rank, float scale, float* out) {
  std::vector<double> scores(static_cast<size_t>(context_len));
  for (int32_t t = 0; t < num_tokens; ++t) {
    const int32_t position = context_len - num_tokens + t;
    for (int32_t h = 0; h < num_heads; ++h) {
      const float* qh = q + (int64_t{t} * num_heads + h) * latent_dim;
      double max_score = -std::numeric_limits<double>::infinity();
      for (int32_t p = 0; p <= position; ++p) {
        const float* c = latent_cache + int64_t{p} * latent_dim;
        double dot = 0.0;
        for (int32_t d = 0; d < latent_dim; ++d) dot += double{qh[d]} * c[d];
        scores[static_cast<size_t>(p)] = dot * scale;
        max_score = std::max(max_score, scores[static_cast<size_t>(p)]);
      }
      double sum = 0.0;
      for (int32_t p = 0; p <= position; ++p) {
        scores[static_cast<size_t>(p)] = std::exp(scores[static_cast<size_t>(p)] - max_score);
        sum += scores[static_cast<size_t>(p)];
      }
      float* o = out + (int64_t{t} * num_heads + h) * kv_lora_rank;
      for (int32_t d = 0; d < kv_lora_rank; ++d) {
        double acc = 0.0;
        for (int32_t p = 0; p <= position; ++p) {
          acc += scores[static_cast<size_t>(p)] * latent_cache[int64_t{p} * latent_dim + d];
        }
        o[d] = static_cast<float>(acc / sum);
      }
    }
  }
}

// The same kernels on the process-wide table.
void write_latent(const PagedKvLayer& cache, const float* latent, const int64_t* slot_mapping,
                  int64_t num_tokens) {
  write_latent(kernels(), cache, latent, slot_mapping, num_tokens);
}

void mla_attention(const float* q, int32_t num_heads, int32_t kv_lora_rank,
                   const PagedKvLayer& cache, const AttentionSequence* seqs, int32_t num_seqs,
                   float scale, float* out) {
  mla_attention(kernels(), q, num_heads, kv_lora_rank, cache, seqs, num_seqs, scale, out);
}

}  // namespace pagoda
