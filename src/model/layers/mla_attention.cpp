#include "model/layers/mla_attention.h"

#include <cstring>

#include "kernels/kernels.h"
#include "kernels/mla_attention.h"
#include "kernels/quantize.h"
#include "loader/safetensors.h"
#include "model/weights.h"

namespace pagoda {

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
    shaped_ = true;
  }
  for (Activation* a : {&q_a_, &q_, &kv_a_, &latent_, &q_nope_, &q_abs_, &ctx_, &ctx_head_, &attn_})
    a->reserve(ctx, num_tokens);
}

MlaAttention::MlaAttention(WeightLoader& loader, const std::string& p, const DeepseekConfig& c,
                           const TensorParallel& tp)
    : num_heads_(tp.even_split(c.num_heads, "attention heads (num_attention_heads)").count),
      q_head_dim_(c.q_head_dim()),
      nope_(c.qk_nope_head_dim),
      rope_dim_(c.qk_rope_head_dim),
      rank_(c.kv_lora_rank),
      v_dim_(c.v_head_dim),
      softmax_scale_(c.softmax_scale),
      q_lora_(c.q_lora_rank > 0) {
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
  const int64_t rank = rank_, vd = v_dim_, L = rank_ + rope_dim_;
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
      const float* qh = q + (t * H + h) * qhd;
      // Absorbed query: its rope part is q's, rotated straight into place; the latent part is
      // filled below.
      kt.rope(qh + nope, cos, sin, rope_dim, /*neox=*/false,
              a.q_abs_.data() + (t * H + h) * L + rank);
      std::memcpy(a.q_nope_.data() + (h * T + t) * nope, qh,
                  static_cast<size_t>(nope) * sizeof(float));
    }
  });
  write_latent(kt, cache, a.latent_.data(), batch.slot_mapping(), T);

  // q_abs[t, h, :rank] = W_uk_h^T q_nope[t, h]: one small matmul per head, heads in parallel
  // (a layer called inside a parallel loop runs on its thread alone).
  ctx.threads().parallel_for(H, [&](int64_t h) {
    w_uk_t_[static_cast<size_t>(h)].forward(ctx, a.q_nope_.data() + h * T * nope, T,
                                            a.q_abs_.data() + h * L, H * L);
  });

  mla_attention(kt, a.q_abs_.data(), static_cast<int32_t>(H), static_cast<int32_t>(rank), cache,
                batch.sequences(), batch.num_sequences(), softmax_scale_, a.ctx_.data());

  // attn[t, h, :] = W_uv_h ctx[t, h, :], then o_proj over all heads.
  ctx.threads().parallel_for(H, [&](int64_t h) {
    float* ctx_h = a.ctx_head_.data() + h * T * rank;
    for (int64_t t = 0; t < T; ++t) {
      std::memcpy(ctx_h + t * rank, a.ctx_.data() + (t * H + h) * rank,
                  static_cast<size_t>(rank) * sizeof(float));
    }
    w_uv_[static_cast<size_t>(h)].forward(ctx, ctx_h, T, a.attn_.data() + h * vd, H * vd);
  });
  o_.forward(ctx, a.attn_.data(), T, out);  // [T, hidden], summed over the group
}

}  // namespace pagoda
