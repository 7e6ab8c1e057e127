#include "model/layers/mla_attention.h"

#include <algorithm>
#include <cstring>

#include "kernels/kernels.h"
#include "kernels/mla_attention.h"
#include "kernels/quantize.h"
#include "loader/safetensors.h"
#include "model/weights.h"

namespace pagoda {
namespace {

// Positions per block of the expanded form's K/V layer. Each block's K and V rows of a head
// (32 x (192 + 128) fp32 = 40 KiB at V2-Lite's shape) stay in L2 while the prefill tile's
// query rows are scored against them and weight them.
constexpr int32_t kExpandedBlockSize = 32;

}  // namespace

void MlaAttention::Activations::reserve(const ExecutionContext& ctx, const DeepseekConfig& c,
                                        int64_t num_heads, int64_t num_tokens) {
  if (!shaped_) {
    const int64_t H = num_heads, latent = c.latent_dim();
    q_a_.set_row_size(c.q_lora_rank);
    q_.set_row_size(H * c.q_head_dim());
    kv_a_.set_row_size(latent);
    latent_.set_row_size(latent);
    q_nope_.set_row_size(H * c.qk_nope_head_dim);
    q_abs_.set_row_size(H * latent);
    ctx_.set_row_size(H * c.kv_lora_rank);
    ctx_head_.set_row_size(H * c.kv_lora_rank);
    attn_.set_row_size(H * c.v_head_dim);
    // The expanded form's buffers have rows per context position or per (position, head) and
    // grow in attend_expanded, with the contexts it meets.
    exp_latent_.set_row_size(c.kv_lora_rank);
    exp_k_pe_.set_row_size(c.qk_rope_head_dim);
    exp_kv_.set_row_size(c.qk_nope_head_dim + c.v_head_dim);
    exp_k_.set_row_size(c.q_head_dim());
    exp_v_.set_row_size(c.v_head_dim);
    exp_q_.set_row_size(c.q_head_dim());
    exp_out_.set_row_size(c.v_head_dim);
    shaped_ = true;
  }
  for (Activation* a : {&q_a_, &q_, &kv_a_, &latent_, &q_nope_, &q_abs_, &ctx_, &ctx_head_, &attn_})
    a->reserve(ctx, num_tokens);
}

MlaAttention::MlaAttention(WeightLoader& loader, const std::string& p, const DeepseekConfig& c,
                           const TensorParallel& tp, ExpandedForm expanded)
    : num_heads_(tp.even_split(c.num_heads, "attention heads (num_attention_heads)").count),
      q_head_dim_(c.q_head_dim()),
      nope_(c.qk_nope_head_dim),
      rope_dim_(c.qk_rope_head_dim),
      rank_(c.kv_lora_rank),
      v_dim_(c.v_head_dim),
      softmax_scale_(c.softmax_scale),
      q_lora_(c.q_lora_rank > 0),
      expanded_(expanded) {
  const int64_t H = num_heads_, hidden = c.hidden_size, qhd = q_head_dim_, nope = nope_;
  const int64_t vd = v_dim_, rank = rank_;
  // This rank's heads are [first, first + H) of the model's all_heads; a head's rows are
  // contiguous in q_b_proj / q_proj (qhd each), kv_b_proj (nope + v each), k_b_proj (kv_lora
  // each) and v_b_proj (v each), and its columns in o_proj (v each).
  const int64_t all_heads = c.num_heads, first = tp.rank() * H;
  const DimShard q_rows{first * qhd, H * qhd};
  if (q_lora_) {
    q_a_ = Linear::load(loader, p + "q_a_proj", c.q_lora_rank, hidden);
    q_a_norm_ = RmsNorm::load(loader, p + "q_a_layernorm.weight", c.q_lora_rank, c.rms_norm_eps);
    q_b_ = Linear::load_rows(loader, p + "q_b_proj", all_heads * qhd, c.q_lora_rank, q_rows);
  } else {
    q_proj_ = Linear::load_rows(loader, p + "q_proj", all_heads * qhd, hidden, q_rows);
  }
  kv_a_ = Linear::load(loader, p + "kv_a_proj_with_mqa", c.latent_dim(), hidden);
  kv_a_norm_ = RmsNorm::load(loader, p + "kv_a_layernorm.weight", rank, c.rms_norm_eps);
  o_ = RowParallelLinear::load(loader, p + "o_proj", hidden, all_heads * vd, tp);

  // GGUF files from llama.cpp's converter carry kv_b_proj already split per head, W_uk
  // transposed (gguf_deepseek2.cpp): the absorbed-MLA matrices are used in place, in any type.
  if (loader.store().find(p + "k_b_proj.weight") != nullptr) {
    const WeightView k_b = loader.matrix_rows_as_stored(p + "k_b_proj.weight", all_heads * rank,
                                                        nope, first * rank, H * rank);
    const WeightView v_b = loader.matrix_rows_as_stored(p + "v_b_proj.weight", all_heads * vd, rank,
                                                        first * vd, H * vd);
    for (int64_t h = 0; h < H; ++h) {
      w_uk_t_.push_back(Linear{weight_rows(k_b, h * rank, rank), {}});
      w_uv_.push_back(Linear{weight_rows(v_b, h * vd, vd), {}});
    }
    return;
  }

  // Split kv_b_proj per head into W_uk (first nope rows) and W_uv (next v rows). W_uv is used
  // in place; W_uk is transposed once so the absorbed query is an ordinary y = x W^T matmul:
  // element by element in its stored float type (no rounding), or as fp32 from a quantized
  // kv_b_proj (older GGUF files), whose groups run along the wrong axis for a transpose.
  const int64_t kv_rows = all_heads * (nope + vd), my_first = first * (nope + vd);
  const WeightView kv_b = loader.matrix_rows_as_stored(p + "kv_b_proj.weight", kv_rows, rank,
                                                       my_first, H * (nope + vd));
  const WeightView kv_b_host =
      loader.stored_rows(p + "kv_b_proj.weight", kv_rows, rank, my_first, H * (nope + vd));
  kv_b_ = kv_b;  // the expanded form multiplies by it as stored
  const bool dequantize = is_quantized(kv_b.dtype);
  const DType uk_dtype = dequantize ? DType::kF32 : kv_b.dtype;
  const int64_t elem = dtype_size(uk_dtype);
  const int64_t head_bytes = rank * nope * elem;  // one head's W_uk^T [rank, nope]
  auto transpose = [&](void* out) {
    std::vector<float> row(dequantize ? static_cast<size_t>(rank) : 0);
    for (int64_t h = 0; h < H; ++h) {
      uint8_t* dst = static_cast<uint8_t*>(out) + h * head_bytes;
      for (int64_t i = 0; i < nope; ++i) {
        const int64_t src_row = h * (nope + vd) + i;  // W_uk row i: [rank]
        if (dequantize) {
          dequantize_row_reference(kv_b_host, src_row, row.data());
          for (int64_t r = 0; r < rank; ++r)
            std::memcpy(dst + (r * nope + i) * elem, &row[static_cast<size_t>(r)], sizeof(float));
          continue;
        }
        const auto* src = static_cast<const uint8_t*>(kv_b_host.data) + src_row * rank * elem;
        for (int64_t r = 0; r < rank; ++r) {
          std::memcpy(dst + (r * nope + i) * elem, src + r * elem, static_cast<size_t>(elem));
        }
      }
    }
  };
  const auto* w_uk_t = static_cast<const uint8_t*>(
      loader.derived(p + "kv_b_proj.weight", static_cast<size_t>(H * head_bytes), transpose));
  for (int64_t h = 0; h < H; ++h) {
    w_uk_t_.push_back(Linear{WeightView{w_uk_t + h * head_bytes, uk_dtype, rank, nope}, {}});
    w_uv_.push_back(Linear{weight_rows(kv_b, h * (nope + vd) + nope, vd), {}});
  }
}

void MlaAttention::forward(const ExecutionContext& ctx, const float* x, const RotaryRows& rope,
                           const PagedKvLayer& cache, const AttentionBatch& batch, Activations& a,
                           float* out) const {
  const KernelTable& kt = ctx.kernels();
  const int64_t T = batch.num_tokens();
  const int64_t H = num_heads_, qhd = q_head_dim_, nope = nope_, rope_dim = rope_dim_;
  const int64_t rank = rank_, L = rank_ + rope_dim_;
  float* q = a.q_.data();

  // The projections of x in one parallel region: q_a [T, q_lora] or q [T, H*qhd], and kv_a
  // [T, kv_lora + rope].
  const LinearCall from_x[] = {q_lora_ ? LinearCall{&q_a_, x, T, a.q_a_.data(), q_a_.out_features()}
                                       : LinearCall{&q_proj_, x, T, q, q_proj_.out_features()},
                               {&kv_a_, x, T, a.kv_a_.data(), kv_a_.out_features()}};
  linear_batch(ctx, from_x);
  if (q_lora_) {
    q_a_norm_.forward(ctx, a.q_a_.data(), T, a.q_a_.data());
    q_b_.forward(ctx, a.q_a_.data(), T, q);  // [T, H*qhd]
  }

  ctx.threads().parallel_for(T, [&](int64_t t) {
    const float* cos = rope.cos(t);
    const float* sin = rope.sin(t);
    // Cache row: normalised latent, then the rotated k_pe (shared by all heads, no norm),
    // rotated straight from kv_a into the row rather than copied and then rotated.
    const float* kv = a.kv_a_.row(t);
    float* row = a.latent_.row(t);
    kv_a_norm_.forward_row(ctx, kv, row);
    kt.rope(kv + rank, cos, sin, rope_dim, /*neox=*/false, row + rank);
    for (int64_t h = 0; h < H; ++h) {
      // q's rope part is rotated in place (the expanded form's query) and copied into the
      // absorbed query, whose latent part is filled in attend_absorbed.
      float* qh = q + (t * H + h) * qhd;
      kt.rope(qh + nope, cos, sin, rope_dim, /*neox=*/false, qh + nope);
      std::memcpy(a.q_abs_.data() + (t * H + h) * L + rank, qh + nope,
                  static_cast<size_t>(rope_dim) * sizeof(float));
      std::memcpy(a.q_nope_.data() + (h * T + t) * nope, qh,
                  static_cast<size_t>(nope) * sizeof(float));
    }
  });
  write_latent(kt, cache, a.latent_.data(), batch.slot_mapping(), T);

  // Each sequence takes one form for all its tokens, chosen by its own count of new tokens, so
  // its results never depend on the rest of the batch.
  a.absorbed_.clear();
  a.expanded_.clear();
  int64_t first_row = T, end_row = 0;  // the absorbed sequences' rows
  for (int32_t i = 0; i < batch.num_sequences(); ++i) {
    const AttentionSequence& s = batch.sequences()[i];
    if (expands(s.num_tokens)) {
      a.expanded_.push_back(s);
      continue;
    }
    a.absorbed_.push_back(s);
    first_row = std::min<int64_t>(first_row, s.token_begin);
    end_row = std::max<int64_t>(end_row, int64_t{s.token_begin} + s.num_tokens);
  }
  // Absorbed first: its up-projection may write rows of expanded sequences that lie between
  // absorbed ones, which the expanded form then overwrites.
  if (!a.absorbed_.empty()) attend_absorbed(ctx, cache, a.absorbed_, T, first_row, end_row, a);
  if (!a.expanded_.empty()) attend_expanded(ctx, cache, a.expanded_, a);
  o_.forward(ctx, a.attn_.data(), T, out);  // [T, hidden], summed over the group
}

void MlaAttention::attend_absorbed(const ExecutionContext& ctx, const PagedKvLayer& cache,
                                   std::span<const AttentionSequence> seqs, int64_t num_tokens,
                                   int64_t first_row, int64_t end_row, Activations& a) const {
  const int64_t T = num_tokens, n = end_row - first_row;
  const int64_t H = num_heads_, nope = nope_, rank = rank_, vd = v_dim_, L = rank_ + rope_dim_;
  // q_abs[t, h, :rank] = W_uk_h^T q_nope[t, h]: one small matmul per head, heads in parallel
  // (a layer called inside a parallel loop runs on its thread alone).
  ctx.threads().parallel_for(H, [&](int64_t h) {
    w_uk_t_[static_cast<size_t>(h)].forward(ctx, a.q_nope_.data() + (h * T + first_row) * nope, n,
                                            a.q_abs_.data() + (first_row * H + h) * L, H * L);
  });

  mla_attention(ctx.kernels(), a.q_abs_.data(), static_cast<int32_t>(H), static_cast<int32_t>(rank),
                cache, seqs.data(), static_cast<int32_t>(seqs.size()), softmax_scale_,
                a.ctx_.data());

  // attn[t, h, :] = W_uv_h ctx[t, h, :].
  ctx.threads().parallel_for(H, [&](int64_t h) {
    float* ctx_h = a.ctx_head_.data() + h * T * rank;
    for (int64_t t = first_row; t < end_row; ++t) {
      std::memcpy(ctx_h + t * rank, a.ctx_.data() + (t * H + h) * rank,
                  static_cast<size_t>(rank) * sizeof(float));
    }
    w_uv_[static_cast<size_t>(h)].forward(ctx, ctx_h + first_row * rank, n,
                                          a.attn_.data() + (first_row * H + h) * vd, H * vd);
  });
}

void MlaAttention::attend_expanded(const ExecutionContext& ctx, const PagedKvLayer& cache,
                                   std::span<const AttentionSequence> seqs, Activations& a) const {
  const KernelTable& kt = ctx.kernels();
  const int64_t H = num_heads_, qhd = q_head_dim_, nope = nope_, rope_dim = rope_dim_;
  const int64_t rank = rank_, vd = v_dim_, kv_width = nope_ + v_dim_;
  constexpr int32_t B = kExpandedBlockSize;
  const auto num_seqs = static_cast<int32_t>(seqs.size());

  // Each sequence as the expanded K/V layer sees it: its new tokens are rows [token_begin, +
  // num_tokens) of exp_q_ / exp_out_, its context positions rows [first_position, +
  // context_len) of exp_latent_, and its blocks follow the previous sequence's.
  a.exp_seqs_.resize(seqs.size());
  a.exp_first_position_.resize(seqs.size());
  int64_t num_positions = 0, num_blocks = 0, num_tokens = 0;
  for (int32_t i = 0; i < num_seqs; ++i) {
    const AttentionSequence& s = seqs[size_t(i)];
    a.exp_seqs_[size_t(i)] = {static_cast<int32_t>(num_tokens), s.num_tokens, s.context_len,
                              nullptr};
    a.exp_first_position_[size_t(i)] = num_positions;
    num_positions += s.context_len;
    num_blocks += (s.context_len + B - 1) / B;
    num_tokens += s.num_tokens;
  }
  a.exp_block_ids_.resize(static_cast<size_t>(num_blocks));
  for (int64_t b = 0; b < num_blocks; ++b) a.exp_block_ids_[size_t(b)] = static_cast<int32_t>(b);
  int64_t first_block = 0;
  for (AttentionSequence& s : a.exp_seqs_) {
    s.block_table = a.exp_block_ids_.data() + first_block;
    first_block += (s.context_len + B - 1) / B;
  }

  // The context's latent rows, widened out of the paged cache: [c | k_pe] -> c and k_pe. The
  // step's own tokens were written before, so they are read back as the cache holds them.
  a.exp_latent_.reserve(ctx, num_positions);
  a.exp_k_pe_.reserve(ctx, num_positions);
  const int64_t value_bytes = dtype_size(cache.dtype);
  for (int32_t i = 0; i < num_seqs; ++i) {
    const AttentionSequence& s = seqs[size_t(i)];
    const int64_t first = a.exp_first_position_[size_t(i)];
    ctx.threads().parallel_for(s.context_len, [&](int64_t p) {
      const int64_t slot =
          int64_t{s.block_table[p / cache.block_size]} * cache.block_size + p % cache.block_size;
      const char* row = cache.k_at(cache.k_index(slot, 0));
      kt.to_f32(row, cache.dtype, rank, a.exp_latent_.row(first + p));
      kt.to_f32(row + rank * value_bytes, cache.dtype, rope_dim, a.exp_k_pe_.row(first + p));
    });
  }

  // Heads in groups whose buffers fit the scratch bytes allowed.
  const int64_t bytes_per_head =
      int64_t{sizeof(float)} *
      (num_positions * kv_width + num_blocks * B * (qhd + vd) + num_tokens * (qhd + vd));
  const int64_t G = std::clamp<int64_t>(expanded_.scratch_bytes / bytes_per_head, 1, H);
  a.exp_kv_.reserve(ctx, num_positions * G);
  a.exp_k_.reserve(ctx, num_blocks * B * G);
  a.exp_v_.reserve(ctx, num_blocks * B * G);
  a.exp_q_.reserve(ctx, num_tokens * G);
  a.exp_out_.reserve(ctx, num_tokens * G);

  for (int64_t g0 = 0; g0 < H; g0 += G) {
    const int64_t num_group = std::min(G, H - g0);
    // [C, group, nope + v]: each head's [W_uk c | W_uv c] at every context position.
    const Linear kv_b{weight_rows(kv_b_, g0 * kv_width, num_group * kv_width), {}};
    kv_b.forward(ctx, a.exp_latent_.data(), num_positions, a.exp_kv_.data());

    PagedKvLayer layer;
    layer.k = a.exp_k_.data();
    layer.v = a.exp_v_.data();
    layer.block_size = B;
    layer.num_kv_heads = static_cast<int32_t>(num_group);
    layer.k_head_dim = static_cast<int32_t>(qhd);
    layer.v_head_dim = static_cast<int32_t>(vd);
    layer.dtype = DType::kF32;
    for (int32_t i = 0; i < num_seqs; ++i) {
      const AttentionSequence& s = a.exp_seqs_[size_t(i)];
      const int64_t first_slot = int64_t{s.block_table[0]} * B;
      const int64_t first_position = a.exp_first_position_[size_t(i)];
      ctx.threads().parallel_for(s.context_len, [&](int64_t p) {
        const float* kv = a.exp_kv_.row((first_position + p) * num_group);
        for (int64_t h = 0; h < num_group; ++h) {
          // K = [W_uk c | k_pe] (k_pe shared by every head), V = W_uv c.
          auto* k = reinterpret_cast<float*>(layer.k_at(layer.k_index(first_slot + p, h)));
          std::memcpy(k, kv + h * kv_width, static_cast<size_t>(nope) * sizeof(float));
          std::memcpy(k + nope, a.exp_k_pe_.row(first_position + p),
                      static_cast<size_t>(rope_dim) * sizeof(float));
          std::memcpy(layer.v_at(layer.v_index(first_slot + p, h)), kv + h * kv_width + nope,
                      static_cast<size_t>(vd) * sizeof(float));
        }
      });
      // The group's queries: q [T, H, qhd] rows of this sequence -> exp_q_ [tokens, group, qhd].
      const AttentionSequence& batch_seq = seqs[size_t(i)];
      ctx.threads().parallel_for(s.num_tokens, [&](int64_t t) {
        std::memcpy(a.exp_q_.row((s.token_begin + t) * num_group),
                    a.q_.data() + ((batch_seq.token_begin + t) * H + g0) * qhd,
                    static_cast<size_t>(num_group * qhd) * sizeof(float));
      });
    }

    paged_attention(kt, a.exp_q_.data(), static_cast<int32_t>(num_group), layer, a.exp_seqs_.data(),
                    num_seqs, softmax_scale_, a.exp_out_.data());

    for (int32_t i = 0; i < num_seqs; ++i) {
      const AttentionSequence& s = a.exp_seqs_[size_t(i)];
      const AttentionSequence& batch_seq = seqs[size_t(i)];
      ctx.threads().parallel_for(s.num_tokens, [&](int64_t t) {
        std::memcpy(a.attn_.data() + ((batch_seq.token_begin + t) * H + g0) * vd,
                    a.exp_out_.row((s.token_begin + t) * num_group),
                    static_cast<size_t>(num_group * vd) * sizeof(float));
      });
    }
  }
}

}  // namespace pagoda
