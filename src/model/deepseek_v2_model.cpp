// The DeepSeek-V2/V3 family: DeepseekV2ForCausalLM (V2, V2-Lite, V2.5) and
// DeepseekV3ForCausalLM (V3, R1). Semantics follow the published modeling_deepseek.py:
//   h = embed(ids)
//   for each layer:
//     x = norm(h)
//     q = q_b(norm(q_a(x))) | q_proj(x)            [T, H, nope + rope]
//     c, k_pe = split(kv_a_proj_with_mqa(x))       [T, kv_lora], [T, rope] (k_pe shared by heads)
//     latent = [norm(c) | rope(k_pe)] -> cache      only these 576 values per token are stored
//     h += o_proj(attention)                        (weight-absorbed MLA, see below)
//     h += mlp(norm(h))                             dense SwiGLU or MoE (moe.h)
//   logits = lm_head(norm(h))
// Absorbed MLA (DeepSeek-V2 paper §2.1.2): kv_b_proj's rows per head are [W_uk (nope) | W_uv
// (v)], each [., kv_lora]. q_nope·k_nope = q_nope·(W_uk c) = (W_uk^T q_nope)·c, so each head's
// query is moved into the latent space once and attends directly over the cached latents; the
// output sum_j p_j (W_uv c_j) = W_uv (sum_j p_j c_j) is up-projected once after the softmax.
// This form is used for prefill too: it never expands K/V for the whole context, which keeps
// chunked prefill over a cached prefix as cheap as a fresh one (see docs/deepseek.md).
// The rope dims of q/k are stored interleaved (pairs 2i, 2i+1): HF de-interleaves and then
// rotates halves, which is the same rotation as rotating adjacent pairs in place.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "kernels/attention.h"
#include "kernels/mla_attention.h"
#include "kernels/ops.h"
#include "kernels/quantize.h"
#include "loader/safetensors.h"
#include "model/deepseek_config.h"
#include "model/model_config.h"
#include "model/model_registry.h"
#include "model/moe.h"
#include "model/rotary_embedding.h"
#include "model/weights.h"
#include "util/error.h"

namespace pagoda {
namespace {

struct DeepseekLayer {
  std::vector<float> input_norm;      // [hidden]
  std::vector<float> post_attn_norm;  // [hidden]
  WeightView q_proj;                  // [H*qhd, hidden]   (q_lora_rank == 0)
  WeightView q_a;                     // [q_lora, hidden]  (q_lora_rank > 0)
  std::vector<float> q_a_norm;        // [q_lora]
  WeightView q_b;                     // [H*qhd, q_lora]
  WeightView kv_a;                    // [kv_lora + rope, hidden]
  std::vector<float> kv_a_norm;       // [kv_lora] (the latent only; k_pe is not normalised)
  std::vector<uint8_t> w_uk_t_data;   // W_uk^T per head, [H, kv_lora, nope] (none with k_b_proj)
  std::vector<WeightView> w_uk_t;     // [H] views [kv_lora, nope] into w_uk_t_data or k_b_proj
  std::vector<WeightView> w_uv;       // [H] views [v, kv_lora] into kv_b_proj or v_b_proj
  WeightView o;                       // [hidden, H*v]
  bool is_moe = false;
  ExpertMlp dense;  // gate/up [inter, hidden], down [hidden, inter]
  MoeWeights moe;
};

class DeepseekModel final : public Model {
 public:
  DeepseekModel(const ModelConfig& config, const TensorStore& store, const ModelOptions& options);

  int64_t vocab_size() const override { return c_.vocab_size; }
  KvCacheSpec kv_cache_spec() const override;
  int64_t num_parameters() const override { return weights_.num_parameters(); }
  int64_t weight_bytes() const override { return weights_.weight_bytes(); }
  void forward(const ForwardBatch& batch, KvCache& cache, float* logits) override;

 private:
  void reserve(int64_t num_tokens);
  void load_attention(const std::string& prefix, DeepseekLayer& l);
  ExpertMlp load_mlp(const std::string& prefix, int64_t inter);
  void attention(const DeepseekLayer& l, const ForwardBatch& batch, const PagedKvLayer& cache);
  void dense_mlp(const ExpertMlp& mlp, int64_t num_tokens);

  WeightView matrix(const std::string& name, int64_t rows, int64_t cols) {
    return weights_.matrix(name, rows, cols);
  }
  std::vector<float> vector(const std::string& name, int64_t n) { return weights_.vector(name, n); }

  DeepseekConfig c_;
  WeightLoader weights_;
  RotaryEmbedding rope_;
  WeightView embed_;
  std::vector<DeepseekLayer> layers_;
  std::vector<float> final_norm_;
  WeightView lm_head_;

  // Activations, sized for the largest batch seen (grown rarely, never per token).
  int64_t capacity_ = 0;
  std::vector<float> residual_, x_, mlp_out_;  // [T, hidden]
  std::vector<float> q_a_;                     // [T, q_lora]
  std::vector<float> q_;                       // [T, H, qhd]
  std::vector<float> kv_a_;                    // [T, kv_lora + rope]
  std::vector<float> latent_;                  // [T, kv_lora + rope] what goes into the cache
  std::vector<float> q_nope_;                  // [H, T, nope] per-head contiguous copies
  std::vector<float> q_abs_;                   // [T, H, kv_lora + rope]
  std::vector<float> ctx_;                  // [T, H, kv_lora] attention output in the latent space
  std::vector<float> ctx_head_;             // [H, T, kv_lora]
  std::vector<float> attn_;                 // [T, H, v]
  std::vector<float> gate_, up_;            // [T, inter]
  std::vector<float> rope_cos_, rope_sin_;  // [T, rope/2]
  std::vector<float> last_rows_;
  std::vector<AttentionSequence> attn_seqs_;
  MoeDispatcher moe_;
};

ExpertMlp DeepseekModel::load_mlp(const std::string& p, int64_t inter) {
  ExpertMlp m;
  m.gate = matrix(p + "gate_proj.weight", inter, c_.hidden_size);
  m.up = matrix(p + "up_proj.weight", inter, c_.hidden_size);
  m.down = matrix(p + "down_proj.weight", c_.hidden_size, inter);
  return m;
}

void DeepseekModel::load_attention(const std::string& p, DeepseekLayer& l) {
  const int64_t H = c_.num_heads, hidden = c_.hidden_size;
  const int64_t qhd = c_.q_head_dim(), nope = c_.qk_nope_head_dim, vd = c_.v_head_dim;
  const int64_t rank = c_.kv_lora_rank;
  if (c_.q_lora_rank > 0) {
    l.q_a = matrix(p + "q_a_proj.weight", c_.q_lora_rank, hidden);
    l.q_a_norm = vector(p + "q_a_layernorm.weight", c_.q_lora_rank);
    l.q_b = matrix(p + "q_b_proj.weight", H * qhd, c_.q_lora_rank);
  } else {
    l.q_proj = matrix(p + "q_proj.weight", H * qhd, hidden);
  }
  l.kv_a = matrix(p + "kv_a_proj_with_mqa.weight", c_.latent_dim(), hidden);
  l.kv_a_norm = vector(p + "kv_a_layernorm.weight", rank);
  l.o = matrix(p + "o_proj.weight", hidden, H * vd);

  // GGUF files from llama.cpp's converter carry kv_b_proj already split per head, W_uk
  // transposed (gguf_deepseek2.cpp): the absorbed-MLA matrices are used in place, in any type.
  if (weights_.store().find(p + "k_b_proj.weight") != nullptr) {
    const WeightView k_b = weights_.matrix_as_stored(p + "k_b_proj.weight", H * rank, nope);
    const WeightView v_b = weights_.matrix_as_stored(p + "v_b_proj.weight", H * vd, rank);
    for (int64_t h = 0; h < H; ++h) {
      l.w_uk_t.push_back(weight_rows(k_b, h * rank, rank));
      l.w_uv.push_back(weight_rows(v_b, h * vd, vd));
    }
    return;
  }

  // Split kv_b_proj per head into W_uk (first nope rows) and W_uv (next v rows). W_uv is used
  // in place; W_uk is transposed once so the absorbed query is an ordinary y = x W^T matmul:
  // element by element in its stored float type (no rounding), or as fp32 from a quantized
  // kv_b_proj (older GGUF files), whose groups run along the wrong axis for a transpose.
  const WeightView kv_b = weights_.matrix_as_stored(p + "kv_b_proj.weight", H * (nope + vd), rank);
  const bool dequantize = is_quantized(kv_b.dtype);
  const DType uk_dtype = dequantize ? DType::kF32 : kv_b.dtype;
  const int64_t elem = dtype_size(uk_dtype);
  l.w_uk_t_data.resize(static_cast<size_t>(H * rank * nope * elem));
  weights_.add_resident_bytes(
      static_cast<int64_t>(l.w_uk_t_data.size()));  // the copy is resident memory
  std::vector<float> row(dequantize ? static_cast<size_t>(rank) : 0);
  for (int64_t h = 0; h < H; ++h) {
    uint8_t* dst = l.w_uk_t_data.data() + h * rank * nope * elem;  // [rank, nope]
    for (int64_t i = 0; i < nope; ++i) {
      const int64_t src_row = h * (nope + vd) + i;  // W_uk row i: [rank]
      if (dequantize) {
        dequantize_row_reference(kv_b, src_row, row.data());
        for (int64_t r = 0; r < rank; ++r)
          std::memcpy(dst + (r * nope + i) * elem, &row[static_cast<size_t>(r)], sizeof(float));
        continue;
      }
      const auto* src = static_cast<const uint8_t*>(kv_b.data) + src_row * rank * elem;
      for (int64_t r = 0; r < rank; ++r) {
        std::memcpy(dst + (r * nope + i) * elem, src + r * elem, static_cast<size_t>(elem));
      }
    }
    l.w_uk_t.push_back(WeightView{dst, uk_dtype, rank, nope});
    l.w_uv.push_back(weight_rows(kv_b, h * (nope + vd) + nope, vd));
  }
}

DeepseekModel::DeepseekModel(const ModelConfig& config, const TensorStore& store,
                             const ModelOptions& options)
    : c_(DeepseekConfig::from_model_config(config)),
      weights_(store, options.weights),
      rope_(c_.rope) {
  embed_ = weights_.matrix_as_stored("model.embed_tokens.weight", c_.vocab_size, c_.hidden_size);
  layers_.resize(static_cast<size_t>(c_.num_layers));
  for (int64_t i = 0; i < c_.num_layers; ++i) {
    DeepseekLayer& l = layers_[static_cast<size_t>(i)];
    const std::string p = fmt::format("model.layers.{}.", i);
    l.input_norm = vector(p + "input_layernorm.weight", c_.hidden_size);
    l.post_attn_norm = vector(p + "post_attention_layernorm.weight", c_.hidden_size);
    load_attention(p + "self_attn.", l);
    l.is_moe = c_.is_moe_layer(i);
    if (!l.is_moe) {
      l.dense = load_mlp(p + "mlp.", c_.intermediate_size);
      continue;
    }
    const MoeRouterConfig& r = c_.router;
    l.moe.router = weights_.matrix_as_stored(p + "mlp.gate.weight", r.num_experts, c_.hidden_size);
    if (r.method == MoeTopkMethod::kNoauxTc) {
      l.moe.score_bias = vector(p + "mlp.gate.e_score_correction_bias", r.num_experts);
    }
    for (int32_t e = 0; e < r.num_experts; ++e) {
      l.moe.experts.push_back(
          load_mlp(fmt::format("{}mlp.experts.{}.", p, e), c_.moe_intermediate_size));
    }
    if (c_.num_shared_experts > 0) {
      l.moe.has_shared = true;
      l.moe.shared =
          load_mlp(p + "mlp.shared_experts.", c_.moe_intermediate_size * c_.num_shared_experts);
    }
  }
  final_norm_ = vector("model.norm.weight", c_.hidden_size);
  if (c_.tie_word_embeddings && store.find("lm_head.weight") == nullptr) {
    lm_head_ = weights_.prepare(embed_, "lm_head.weight");
  } else {
    lm_head_ = matrix("lm_head.weight", c_.vocab_size, c_.hidden_size);
  }

  // V3/R1 checkpoints carry multi-token-prediction layers after the last decoder layer; they
  // only serve speculative decoding, which Pagoda does not do, so they are left unread.
  int64_t num_mtp_tensors = 0;
  const std::string first_mtp = fmt::format("model.layers.{}.", c_.num_layers);
  for (const auto& [name, tensor] : store.tensors()) {
    if (name.rfind("model.layers.", 0) != 0) continue;
    const int64_t index = std::atoll(name.c_str() + std::strlen("model.layers."));
    if (index >= c_.num_layers) ++num_mtp_tensors;
  }
  if (num_mtp_tensors > 0 || c_.num_nextn_predict_layers > 0) {
    spdlog::info(
        "{}: skipping {} multi-token-prediction layer(s) ({} tensors from {}) — not used "
        "for generation",
        config.config_path, c_.num_nextn_predict_layers, num_mtp_tensors, first_mtp);
  }

  // The activations (and the MoE dispatcher's buffers) grow with the largest step seen:
  // forward() reserves what it needs. Sized for max_num_batched_tokens here, a short run would
  // pay for zeroing and faulting in memory it never touches (~0.5 GB at V2-Lite's shape).
}

KvCacheSpec DeepseekModel::kv_cache_spec() const {
  // One latent vector per token and layer, shared by all heads: never expanded K/V.
  KvCacheSpec spec;
  spec.num_layers = static_cast<int32_t>(c_.num_layers);
  spec.num_kv_heads = 1;
  spec.k_head_dim = static_cast<int32_t>(c_.latent_dim());
  spec.v_head_dim = 0;
  return spec;
}

void DeepseekModel::reserve(int64_t num_tokens) {
  if (num_tokens <= capacity_) return;
  capacity_ = num_tokens;
  const auto n = static_cast<size_t>(num_tokens);
  const auto H = static_cast<size_t>(c_.num_heads);
  const auto hidden = static_cast<size_t>(c_.hidden_size);
  const auto latent = static_cast<size_t>(c_.latent_dim());
  const auto rank = static_cast<size_t>(c_.kv_lora_rank);
  residual_.resize(n * hidden);
  x_.resize(n * hidden);
  mlp_out_.resize(n * hidden);
  q_a_.resize(n * static_cast<size_t>(c_.q_lora_rank));
  q_.resize(n * H * static_cast<size_t>(c_.q_head_dim()));
  kv_a_.resize(n * latent);
  latent_.resize(n * latent);
  q_nope_.resize(H * n * static_cast<size_t>(c_.qk_nope_head_dim));
  q_abs_.resize(n * H * latent);
  ctx_.resize(n * H * rank);
  ctx_head_.resize(H * n * rank);
  attn_.resize(n * H * static_cast<size_t>(c_.v_head_dim));
  gate_.resize(n * static_cast<size_t>(c_.intermediate_size));
  up_.resize(n * static_cast<size_t>(c_.intermediate_size));
  rope_cos_.resize(n * static_cast<size_t>(c_.qk_rope_head_dim / 2));
  rope_sin_.resize(n * static_cast<size_t>(c_.qk_rope_head_dim / 2));
}

void DeepseekModel::attention(const DeepseekLayer& l, const ForwardBatch& batch,
                              const PagedKvLayer& cache) {
  const KernelTable& kt = kernels();
  const int64_t T = batch.num_tokens();
  const int64_t H = c_.num_heads, qhd = c_.q_head_dim(), nope = c_.qk_nope_head_dim;
  const int64_t rope_dim = c_.qk_rope_head_dim, rank = c_.kv_lora_rank, vd = c_.v_head_dim;
  const int64_t L = c_.latent_dim();
  const int64_t half = rope_dim / 2;

  // The projections of x in one parallel region: q_a [T, q_lora] or q [T, H*qhd], and kv_a
  // [T, kv_lora + rope].
  const bool q_lora = c_.q_lora_rank > 0;
  const ops::MatmulJob from_x[] = {
      q_lora ? ops::MatmulJob{x_.data(), T, &l.q_a, q_a_.data(), l.q_a.rows}
             : ops::MatmulJob{x_.data(), T, &l.q_proj, q_.data(), l.q_proj.rows},
      {x_.data(), T, &l.kv_a, kv_a_.data(), l.kv_a.rows}};
  ops::matmul_batch(from_x);
  if (q_lora) {
    ops::rms_norm_rows(q_a_.data(), l.q_a_norm.data(), c_.rms_norm_eps, T, c_.q_lora_rank,
                       q_a_.data());
    ops::matmul(q_a_.data(), T, l.q_b, q_.data());  // [T, H*qhd]
  }

  // cos/sin rows were filled once for this forward pass (forward()).
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    const float* cos = &rope_cos_[static_cast<size_t>(t * half)];
    const float* sin = &rope_sin_[static_cast<size_t>(t * half)];
    // Cache row: normalised latent, then the rotated k_pe (shared by all heads, no norm),
    // rotated straight from kv_a into the row rather than copied and then rotated.
    const float* kv = &kv_a_[static_cast<size_t>(t * L)];
    float* row = &latent_[static_cast<size_t>(t * L)];
    kt.rms_norm(kv, l.kv_a_norm.data(), c_.rms_norm_eps, rank, row);
    kt.rope(kv + rank, cos, sin, rope_dim, /*neox=*/false, row + rank);
    for (int64_t h = 0; h < H; ++h) {
      const float* qh = &q_[static_cast<size_t>((t * H + h) * qhd)];
      // Absorbed query: its rope part is q's, rotated straight into place; the latent part is
      // filled below.
      kt.rope(qh + nope, cos, sin, rope_dim, /*neox=*/false,
              &q_abs_[static_cast<size_t>((t * H + h) * L + rank)]);
      std::memcpy(&q_nope_[static_cast<size_t>((h * T + t) * nope)], qh,
                  static_cast<size_t>(nope) * sizeof(float));
    }
  }
  write_latent(cache, latent_.data(), batch.slot_mapping.data(), T);

  // q_abs[t, h, :rank] = W_uk_h^T q_nope[t, h]: one small matmul per head, heads in parallel
  // (ops run single-threaded inside a parallel region).
#pragma omp parallel for schedule(static)
  for (int64_t h = 0; h < H; ++h) {
    ops::matmul(&q_nope_[static_cast<size_t>(h * T * nope)], T, l.w_uk_t[static_cast<size_t>(h)],
                &q_abs_[static_cast<size_t>(h * L)], H * L);
  }

  mla_attention(q_abs_.data(), static_cast<int32_t>(H), static_cast<int32_t>(rank), cache,
                attn_seqs_.data(), static_cast<int32_t>(attn_seqs_.size()), c_.softmax_scale,
                ctx_.data());

  // attn[t, h, :] = W_uv_h ctx[t, h, :], then o_proj over all heads.
#pragma omp parallel for schedule(static)
  for (int64_t h = 0; h < H; ++h) {
    float* ctx_h = &ctx_head_[static_cast<size_t>(h * T * rank)];
    for (int64_t t = 0; t < T; ++t) {
      std::memcpy(ctx_h + t * rank, &ctx_[static_cast<size_t>((t * H + h) * rank)],
                  static_cast<size_t>(rank) * sizeof(float));
    }
    ops::matmul(ctx_h, T, l.w_uv[static_cast<size_t>(h)], &attn_[static_cast<size_t>(h * vd)],
                H * vd);
  }
  ops::matmul(attn_.data(), T, l.o, x_.data());  // [T, hidden]
}

void DeepseekModel::dense_mlp(const ExpertMlp& mlp, int64_t T) {
  const int64_t inter = mlp.gate.rows;
  const ops::MatmulJob gate_up[] = {{x_.data(), T, &mlp.gate, gate_.data(), inter},
                                    {x_.data(), T, &mlp.up, up_.data(), inter}};
  ops::matmul_batch(gate_up);
  ops::silu_mul(gate_.data(), up_.data(), T * inter, gate_.data());
  ops::matmul(gate_.data(), T, mlp.down, mlp_out_.data());
}

void DeepseekModel::forward(const ForwardBatch& batch, KvCache& cache, float* logits) {
  const KernelTable& kt = kernels();
  const int64_t T = batch.num_tokens();
  const int64_t hidden = c_.hidden_size;
  reserve(T);

  ops::embedding_lookup(embed_, batch.token_ids.data(), T, residual_.data());  // [T, hidden]
  attn_seqs_.clear();
  for (const ForwardSequence& s : batch.sequences) {
    attn_seqs_.push_back({s.token_begin, s.num_tokens, s.context_len, s.block_table});
  }
  // cos/sin depend only on the positions, so one set of rows serves every layer's attention.
  rope_.cos_sin_rows(batch.positions.data(), T, rope_cos_.data(), rope_sin_.data());

  for (int64_t i = 0; i < c_.num_layers; ++i) {
    const DeepseekLayer& l = layers_[static_cast<size_t>(i)];
    ops::rms_norm_rows(residual_.data(), l.input_norm.data(), c_.rms_norm_eps, T, hidden,
                       x_.data());
    attention(l, batch, cache.layer(static_cast<int32_t>(i)));  // x_ = o_proj(attn)
    // h += attn; x = norm(h)
    ops::add_rms_norm_rows(residual_.data(), x_.data(), l.post_attn_norm.data(), c_.rms_norm_eps, T,
                           hidden, mlp_out_.data());
    std::memcpy(x_.data(), mlp_out_.data(), static_cast<size_t>(T * hidden) * sizeof(float));
    if (l.is_moe) {
      moe_.forward(c_.router, l.moe, x_.data(), T, mlp_out_.data());
    } else {
      dense_mlp(l.dense, T);
    }
    for (int64_t j = 0; j < T * hidden; ++j)
      residual_[static_cast<size_t>(j)] += mlp_out_[static_cast<size_t>(j)];
  }

  // Only the rows that need logits (the sampled last row, or every row of a sequence asking for
  // prompt logprobs) go through the final norm and the vocabulary projection.
  const int64_t num_rows = batch.num_logit_rows();
  if (num_rows == 0) return;
  last_rows_.resize(static_cast<size_t>(num_rows * hidden));
  int64_t r = 0;
  for (const ForwardSequence& s : batch.sequences) {
    const int64_t end = s.token_begin + s.num_tokens;
    for (int64_t row = end - s.num_logit_rows(); row < end; ++row, ++r) {
      kt.rms_norm(&residual_[static_cast<size_t>(row * hidden)], final_norm_.data(),
                  c_.rms_norm_eps, hidden, &last_rows_[static_cast<size_t>(r * hidden)]);
    }
  }
  ops::matmul(last_rows_.data(), num_rows, lm_head_, logits);  // [rows, vocab]
}

}  // namespace

std::unique_ptr<Model> create_deepseek_model(const ModelConfig& config, const TensorStore& store,
                                             const ModelOptions& options) {
  return std::make_unique<DeepseekModel>(config, store, options);
}

}  // namespace pagoda
