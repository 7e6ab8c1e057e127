// Paged attention: the KV-cache write (plain, or with rope fused in), the blocked online-softmax
// attention the model runs, and the contiguous reference the tests compare it with.
#include "kernels/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/kernels.h"

namespace pagoda {
namespace {

// Per-thread working memory, grown once to the largest shape seen and then reused.
struct AttentionScratch {
  std::vector<float> scores;  // [key tile], one (token, head) at a time; [rows, key tile] for
                              // a prefill tile
  std::vector<float> q;       // prefill tile: its query rows, contiguous [rows, k_head_dim]
  std::vector<float> scale;   // prefill tile: each row's rescale for this key tile
  std::vector<float> acc;     // [tokens * group, v_head_dim] running weighted sum of v
  std::vector<float> max;     // [tokens * group] running max score
  std::vector<float> sum;     // [tokens * group] running sum of exp(score - max)
};

// Asks for `bytes` from `p` on to be brought into L2: the next key tile's rows while this
// one is worked on, so that the first lines of each block do not wait on DRAM (the hardware
// prefetcher only picks a stream up after its first misses). L2, not L1: a key tile of fp32
// k and v rows (64 KiB at 128 dims) would evict the one being worked on from L1.
void prefetch_bytes(const char* p, int64_t bytes) {
  constexpr int64_t kLine = 64;
  for (int64_t b = 0; b < bytes; b += kLine) __builtin_prefetch(p + b, 0, 2);
}

// The first k and v row of `kv_head` in the block holding position block_start of `seq`; the
// head's other rows of that block follow contiguously.
std::pair<const char*, const char*> kv_head_rows(const PagedKvLayer& cache,
                                                 const AttentionSequence& seq, int32_t kv_head,
                                                 int32_t block_start) {
  const int64_t first_slot =
      int64_t{seq.block_table[block_start / cache.block_size]} * cache.block_size;
  return {cache.k_at(cache.k_index(first_slot, kv_head)),
          cache.v_at(cache.v_index(first_slot, kv_head))};
}

// Consecutive new tokens of one sequence that one work item attends together: each cache block
// is then read from L2 once per tile instead of once per token, and reused from L1.
constexpr int32_t kTokenTile = 8;

// The online softmax advances a key tile at a time: whole cache blocks, about this many
// positions (one block where blocks are larger). Every step costs each query row a max, a
// possible rescale, an exp_shifted call and their bookkeeping; a 64-position step pays that a
// quarter as often as a 16-position block did, and lets attention_values keep its
// accumulators in registers across 64 cache rows. Both paths (attend_tokens,
// attend_prefill_tile) step by the same key tiles, from position 0, so that a token's bits do
// not depend on the path that attends it.
constexpr int32_t kKeyTilePositions = 64;

int32_t key_tile_blocks(int32_t block_size) {
  return std::max(1, kKeyTilePositions / block_size);
}

// The cache blocks of one key tile [start, start + len) for one kv head: their first k and v
// rows, and the positions each holds.
struct KeyTile {
  static constexpr int32_t kMaxBlocks = kKeyTilePositions;  // blocks of 1 position
  int32_t start = 0, len = 0, num_blocks = 0;
  const void* k[kMaxBlocks];
  const void* v[kMaxBlocks];
  int32_t block_len[kMaxBlocks];
};

// Fills `tile` with the blocks of [start, min(start + tile positions, end)) and prefetches the
// next tile's rows (up to `end`) into L2.
void load_key_tile(const PagedKvLayer& cache, const AttentionSequence& seq, int32_t kv_head,
                   int32_t start, int32_t end, KeyTile& tile) {
  const int32_t bs = cache.block_size, blocks = key_tile_blocks(bs);
  tile.start = start;
  tile.len = std::min(blocks * bs, end - start);
  tile.num_blocks = (tile.len + bs - 1) / bs;
  for (int32_t b = 0; b < tile.num_blocks; ++b) {
    std::tie(tile.k[b], tile.v[b]) = kv_head_rows(cache, seq, kv_head, start + b * bs);
    tile.block_len[b] = std::min(bs, tile.len - b * bs);
  }
  const int64_t value_bytes = dtype_size(cache.dtype);
  for (int32_t next = start + blocks * bs, b = 0; b < blocks && next < end; ++b, next += bs) {
    const auto [k_next, v_next] = kv_head_rows(cache, seq, kv_head, next);
    const int64_t rows = std::min(bs, end - next);
    prefetch_bytes(k_next, rows * cache.k_head_dim * value_bytes);
    prefetch_bytes(v_next, rows * cache.v_head_dim * value_bytes);
  }
}

// Multiplies the first n scores by `scale` and returns their maximum.
float scale_and_max(float* scores, int32_t n, float scale) {
  // Eight running maxima, so that the loop vectorizes (max is exact in any order).
  constexpr int kWays = 8;
  float m[kWays];
  std::fill(m, m + kWays, -std::numeric_limits<float>::infinity());
  int32_t j = 0;
  for (; j + kWays <= n; j += kWays) {
    for (int w = 0; w < kWays; ++w) {
      scores[j + w] *= scale;
      m[w] = std::max(m[w], scores[j + w]);
    }
  }
  for (; j < n; ++j) {
    scores[j] *= scale;
    m[0] = std::max(m[0], scores[j]);
  }
  return *std::max_element(m, m + kWays);
}

// One work item: every query head of one kv-head group, for tokens [first_token, first_token +
// num_tokens) of one sequence. The group shares each k/v row read from the cache, which is what
// makes decode cheap under GQA. For each key tile and each (token, head): scores for the tile's
// positions the token may see, one rescale of its running state to the new maximum, then exp
// and accumulate (Dao et al., FlashAttention, algorithm 1). Each (token, head) runs the same
// operations in the same order whatever the tile, so results do not depend on the batch.
void attend_tokens(const KernelTable& kt, const float* q, int32_t num_heads,
                   const PagedKvLayer& cache, const AttentionSequence& seq, int32_t first_token,
                   int32_t num_tokens, int32_t kv_head, float scale, float* out,
                   AttentionScratch& s) {
  const int32_t group = num_heads / cache.num_kv_heads;
  const int32_t dk = cache.k_head_dim, dv = cache.v_head_dim, bs = cache.block_size;
  const int32_t first_position = seq.context_len - seq.num_tokens + first_token;
  const int32_t num_states = num_tokens * group;  // state i: token i / group, head i % group

  s.scores.resize(size_t(key_tile_blocks(bs)) * bs);
  s.acc.assign(size_t(num_states) * dv, 0.0f);
  s.max.assign(num_states, -std::numeric_limits<float>::infinity());
  s.sum.assign(num_states, 0.0f);

  const int32_t last_num_positions = first_position + num_tokens;
  KeyTile tile;
  for (int32_t start = 0; start < last_num_positions; start += tile.len) {
    load_key_tile(cache, seq, kv_head, start, last_num_positions, tile);
    for (int32_t i = 0; i < num_states; ++i) {
      const int32_t token = first_token + i / group;
      const int32_t num_positions = first_position + i / group + 1;  // causal: itself included
      if (start >= num_positions) continue;
      const int32_t visible = std::min(tile.len, num_positions - start);
      const float* qh = q + ((seq.token_begin + token) * int64_t{num_heads} +
                             int64_t{kv_head} * group + i % group) *
                                dk;
      float* scores = s.scores.data();
      for (int32_t b = 0; b * bs < visible; ++b) {
        kt.dot_rows(qh, tile.k[b], cache.dtype, dk, std::min(bs, visible - b * bs), dk,
                    scores + b * bs);
      }
      const float new_max = std::max(s.max[i], scale_and_max(scores, visible, scale));
      float* acc = s.acc.data() + size_t(i) * dv;
      if (new_max > s.max[i] && s.sum[i] > 0.0f) {
        const float correction = std::exp(s.max[i] - new_max);
        s.sum[i] *= correction;
        for (int32_t d = 0; d < dv; ++d) acc[d] *= correction;
      }
      s.max[i] = new_max;
      s.sum[i] += kt.exp_shifted(scores, new_max, visible);
      for (int32_t b = 0; b * bs < visible; ++b) {
        kt.axpy_rows(scores + b * bs, tile.v[b], cache.dtype, dv, std::min(bs, visible - b * bs),
                     dv, acc);
      }
    }
  }
  for (int32_t i = 0; i < num_states; ++i) {
    const int64_t row = seq.token_begin + first_token + i / group;
    float* o = out + (row * num_heads + int64_t{kv_head} * group + i % group) * dv;
    const float inv_sum = 1.0f / s.sum[i];
    const float* acc = s.acc.data() + size_t(i) * dv;
    for (int32_t d = 0; d < dv; ++d) o[d] = acc[d] * inv_sum;
  }
}

// A sequence with at least this many new tokens takes the prefill tiles; fewer (decode) keep
// attend_tokens. A sequence takes one path for all its tokens, so which one depends only on its
// own chunk, never on the rest of the batch.
constexpr int32_t kMinTileTokens = 2;

// Query rows per prefill work item: the kv group's heads times as many tokens as fit. Each
// cache block is then read once per this many rows; the tile's accumulators (rows x v_head_dim
// fp32, 32 KiB at 64 x 128) and a block's k and v rows stay in L1/L2 while they are reused.
constexpr int32_t kTileRows = 64;

int32_t prefill_tile_tokens(int32_t group) {
  return std::max(1, kTileRows / group);
}

// One prefill work item: every query head of one kv-head group for tokens [first_token,
// first_token + num_tokens) of one sequence, as rows r = token * group + head. For each key
// tile the tile's scores are small matrix products (attention_scores, a block at a time), each
// row's online softmax state is updated from its scores (Dao et al., FlashAttention, algorithm
// 1), and the weighted v rows are a second product over the whole key tile (attention_values,
// accumulators in registers across its blocks) that applies each row's rescale as it loads
// the accumulators. Causal: the products run only for the rows that see at least the first
// position of a block (scores) or of the key tile (values) — rows are in token order, so
// these are the last ones —, a row's weights past its position are zeroed (they add exactly
// 0), and no block past the tile's last position is read.
void attend_prefill_tile(const KernelTable& kt, const float* q, int32_t num_heads,
                         const PagedKvLayer& cache, const AttentionSequence& seq,
                         int32_t first_token, int32_t num_tokens, int32_t kv_head, float scale,
                         float* out, AttentionScratch& s) {
  const int32_t group = num_heads / cache.num_kv_heads;
  const int32_t dk = cache.k_head_dim, dv = cache.v_head_dim, bs = cache.block_size;
  const int32_t first_position = seq.context_len - seq.num_tokens + first_token;
  const int32_t num_rows = num_tokens * group;
  const int32_t lds = key_tile_blocks(bs) * bs;

  s.q.resize(size_t(num_rows) * dk);
  for (int32_t r = 0; r < num_rows; ++r) {
    const int64_t row = seq.token_begin + first_token + r / group;
    std::memcpy(s.q.data() + size_t(r) * dk,
                q + (row * num_heads + int64_t{kv_head} * group + r % group) * dk,
                size_t(dk) * sizeof(float));
  }
  s.scores.resize(size_t(num_rows) * lds);
  s.scale.resize(size_t(num_rows));
  s.acc.assign(size_t(num_rows) * dv, 0.0f);
  s.max.assign(num_rows, -std::numeric_limits<float>::infinity());
  s.sum.assign(num_rows, 0.0f);

  // The first row that sees `position`: its token is position - first_position.
  const auto first_row_seeing = [&](int32_t position) {
    return std::clamp((position - first_position) * group, 0, num_rows);
  };
  const int32_t last_num_positions = first_position + num_tokens;
  KeyTile tile;
  for (int32_t start = 0; start < last_num_positions; start += tile.len) {
    load_key_tile(cache, seq, kv_head, start, last_num_positions, tile);
    for (int32_t b = 0; b < tile.num_blocks; ++b) {
      const int32_t r0 = first_row_seeing(start + b * bs);
      kt.attention_scores(s.q.data() + size_t(r0) * dk, dk, num_rows - r0, tile.k[b], cache.dtype,
                          dk, tile.block_len[b], dk, s.scores.data() + size_t(r0) * lds + b * bs,
                          lds);
    }
    for (int32_t r = first_row_seeing(start); r < num_rows; ++r) {
      float* scores = s.scores.data() + size_t(r) * lds;
      // Positions of this key tile the row may see: causal, itself included.
      const int32_t visible = std::min(tile.len, first_position + r / group + 1 - start);
      const float new_max = std::max(s.max[r], scale_and_max(scores, visible, scale));
      s.scale[r] = 1.0f;
      if (new_max > s.max[r] && s.sum[r] > 0.0f) {
        s.scale[r] = std::exp(s.max[r] - new_max);
        s.sum[r] *= s.scale[r];
      }
      s.max[r] = new_max;
      s.sum[r] += kt.exp_shifted(scores, new_max, visible);
      std::fill(scores + visible, scores + tile.len, 0.0f);
    }
    const int32_t r0 = first_row_seeing(start);
    kt.attention_values(s.scores.data() + size_t(r0) * lds, lds, num_rows - r0, s.scale.data() + r0,
                        tile.v, bs, cache.dtype, dv, tile.len, dv, s.acc.data() + size_t(r0) * dv,
                        dv);
  }
  for (int32_t r = 0; r < num_rows; ++r) {
    const int64_t row = seq.token_begin + first_token + r / group;
    float* o = out + (row * num_heads + int64_t{kv_head} * group + r % group) * dv;
    const float inv_sum = 1.0f / s.sum[r];
    const float* acc = s.acc.data() + size_t(r) * dv;
    for (int32_t d = 0; d < dv; ++d) o[d] = acc[d] * inv_sum;
  }
}

// Tokens per work item for a sequence: a prefill tile, or kTokenTile for attend_tokens.
int32_t tile_tokens(const AttentionSequence& seq, int32_t group) {
  return seq.num_tokens >= kMinTileTokens ? prefill_tile_tokens(group) : kTokenTile;
}

}  // namespace

void write_kv(const KernelTable& kt, const PagedKvLayer& cache, const float* k, const float* v,
              const int64_t* slot_mapping, int64_t num_tokens) {
  const int64_t dk = cache.k_head_dim, dv = cache.v_head_dim;
  for (int64_t i = 0; i < num_tokens; ++i) {
    const int64_t slot = slot_mapping[i];
    if (slot < 0) continue;
    for (int64_t h = 0; h < cache.num_kv_heads; ++h) {
      const int64_t head = i * cache.num_kv_heads + h;
      kt.from_f32(k + head * dk, cache.dtype, dk, cache.k_at(cache.k_index(slot, h)));
      kt.from_f32(v + head * dv, cache.dtype, dv, cache.v_at(cache.v_index(slot, h)));
    }
  }
}

void write_kv_rope(const KernelTable& kt, const PagedKvLayer& cache, const RopeRows& rope, float* q,
                   int32_t num_q_heads, const float* k, const float* v, const int64_t* slot_mapping,
                   int64_t num_tokens) {
  const int64_t dk = cache.k_head_dim, dv = cache.v_head_dim;
  const int64_t half = rope.rotary_dim / 2;
  const auto tail_bytes = static_cast<size_t>(dk - rope.rotary_dim) * sizeof(float);
  // An fp32 cache takes the rotated k straight into its row; a 16-bit one gets it through a
  // per-thread fp32 row, then narrowed.
  const bool in_place = cache.dtype == DType::kF32;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < num_tokens; ++i) {
    static thread_local std::vector<float> rotated;
    const float* cos = rope.cos + i * half;
    const float* sin = rope.sin + i * half;
    float* q_row = q + i * num_q_heads * dk;
    for (int64_t h = 0; h < num_q_heads; ++h) {
      kt.rope(q_row + h * dk, cos, sin, rope.rotary_dim, rope.neox, q_row + h * dk);
    }
    const int64_t slot = slot_mapping[i];
    if (slot < 0) continue;
    if (!in_place) rotated.resize(static_cast<size_t>(dk));
    for (int64_t h = 0; h < cache.num_kv_heads; ++h) {
      const int64_t head = i * cache.num_kv_heads + h;
      const float* k_head = k + head * dk;
      char* k_row = cache.k_at(cache.k_index(slot, h));
      float* k_out = in_place ? reinterpret_cast<float*>(k_row) : rotated.data();
      kt.rope(k_head, cos, sin, rope.rotary_dim, rope.neox, k_out);
      std::memcpy(k_out + rope.rotary_dim, k_head + rope.rotary_dim, tail_bytes);
      if (!in_place) kt.from_f32(k_out, cache.dtype, dk, k_row);
      kt.from_f32(v + head * dv, cache.dtype, dv, cache.v_at(cache.v_index(slot, h)));
    }
  }
}

void paged_attention(const KernelTable& kt, const float* q, int32_t num_heads,
                     const PagedKvLayer& cache, const AttentionSequence* seqs, int32_t num_seqs,
                     float scale, float* out) {
  // Work items in order: sequence, then tile of tokens (tile_tokens), then kv head.
  // item_begin[i] is the first item of sequence i; kept per thread and grown once, like the
  // scratch.
  const int32_t group = num_heads / cache.num_kv_heads;
  static thread_local std::vector<int64_t> item_begin;
  item_begin.resize(size_t(num_seqs) + 1);
  item_begin[0] = 0;
  for (int32_t i = 0; i < num_seqs; ++i) {
    const int32_t tile = tile_tokens(seqs[i], group);
    const int64_t num_tiles = (seqs[i].num_tokens + tile - 1) / tile;
    item_begin[i + 1] = item_begin[i] + num_tiles * cache.num_kv_heads;
  }
  const int64_t num_items = item_begin[num_seqs];
  const int64_t* begins = item_begin.data();
  // Items differ in cost (later prefill tiles see more context), hence dynamic scheduling.
#pragma omp parallel for schedule(dynamic, 1) if (num_items > 1 && !omp_in_parallel())
  for (int64_t item = 0; item < num_items; ++item) {
    static thread_local AttentionScratch scratch;
    const int32_t seq =
        static_cast<int32_t>(std::upper_bound(begins, begins + num_seqs + 1, item) - begins - 1);
    const int64_t local = item - begins[seq];
    const AttentionSequence& sequence = seqs[seq];
    const int32_t tile = tile_tokens(sequence, group);
    const int32_t first_token = static_cast<int32_t>(local / cache.num_kv_heads) * tile;
    const int32_t num_tokens = std::min(tile, sequence.num_tokens - first_token);
    const auto kv_head = static_cast<int32_t>(local % cache.num_kv_heads);
    if (sequence.num_tokens >= kMinTileTokens) {
      attend_prefill_tile(kt, q, num_heads, cache, sequence, first_token, num_tokens, kv_head,
                          scale, out, scratch);
    } else {
      attend_tokens(kt, q, num_heads, cache, sequence, first_token, num_tokens, kv_head, scale, out,
                    scratch);
    }
  }
}

void paged_attention_reference(const float* q, int32_t num_tokens, int32_t num_heads,
                               const float* k, const float* v, int32_t context_len,
                               int32_t num_kv_heads, int32_t k_head_dim, int32_t v_head_dim,
                               float scale, float* out) {
  const int32_t group = num_heads / num_kv_heads;
  std::vector<double> scores(context_len);
  for (int32_t t = 0; t < num_tokens; ++t) {
    const int32_t position = context_len - num_tokens + t;
    for (int32_t h = 0; h < num_heads; ++h) {
      const int32_t kv_head = h / group;
      const float* qh = q + (int64_t{t} * num_heads + h) * k_head_dim;
      double max_score = -std::numeric_limits<double>::infinity();
      for (int32_t p = 0; p <= position; ++p) {
        const float* kr = k + (int64_t{p} * num_kv_heads + kv_head) * k_head_dim;
        double dot = 0.0;
        for (int32_t d = 0; d < k_head_dim; ++d) dot += double{qh[d]} * kr[d];
        scores[p] = dot * scale;
        max_score = std::max(max_score, scores[p]);
      }
      double sum = 0.0;
      for (int32_t p = 0; p <= position; ++p) {
        scores[p] = std::exp(scores[p] - max_score);
        sum += scores[p];
      }
      float* o = out + (int64_t{t} * num_heads + h) * v_head_dim;
      for (int32_t d = 0; d < v_head_dim; ++d) {
        double acc = 0.0;
        for (int32_t p = 0; p <= position; ++p) {
          acc += scores[p] * v[(int64_t{p} * num_kv_heads + kv_head) * v_head_dim + d];
        }
        o[d] = static_cast<float>(acc / sum);
      }
    }
  }
}

// The same kernels on the process-wide table.
void write_kv(const PagedKvLayer& cache, const float* k, const float* v,
              const int64_t* slot_mapping, int64_t num_tokens) {
  write_kv(kernels(), cache, k, v, slot_mapping, num_tokens);
}

void write_kv_rope(const PagedKvLayer& cache, const RopeRows& rope, float* q, int32_t num_q_heads,
                   const float* k, const float* v, const int64_t* slot_mapping,
                   int64_t num_tokens) {
  write_kv_rope(kernels(), cache, rope, q, num_q_heads, k, v, slot_mapping, num_tokens);
}

void paged_attention(const float* q, int32_t num_heads, const PagedKvLayer& cache,
                     const AttentionSequence* seqs, int32_t num_seqs, float scale, float* out) {
  paged_attention(kernels(), q, num_heads, cache, seqs, num_seqs, scale, out);
}

}  // namespace pagoda
