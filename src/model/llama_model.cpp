// The dense decoder family: LlamaForCausalLM (DeepSeek-LLM 7B/67B, DeepSeek-Coder,
// R1-Distill-Llama) and Qwen2ForCausalLM (R1-Distill-Qwen), which is the same graph with
// biases on q/k/v. Semantics follow Hugging Face's modeling_llama.py / modeling_qwen2.py:
//   h = embed(ids)
//   for each layer: h += o_proj(attn(rope(q(norm(h))), rope(k(norm(h))), v(norm(h))))
//                   h += down(silu(gate(norm(h))) * up(norm(h)))
//   logits = lm_head(norm(h))
// This file only says which layers, in which order, on which tensors; the layers
// (model/layers/) do the work on the execution context they are given.
// Tensor parallel (ModelOptions::tensor_parallel, after Megatron-LM): each rank holds
// heads/T query heads and kv_heads/T KV heads (q/k/v column-parallel, o_proj row-parallel),
// inter/T MLP rows (gate/up column-parallel, down row-parallel) and a vocabulary range
// (embedding and lm_head); its KV cache holds only its KV heads.
// Pipeline parallel (ModelOptions::pipeline_parallel): each stage holds a contiguous range of
// layers (and their KV cache); the first embeds, the last runs the head, and h crosses from
// stage to stage (model/pipeline_parallel.h).
#include <cmath>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "model/layers/activation.h"
#include "model/layers/attention_batch.h"
#include "model/layers/embedding.h"
#include "model/layers/gated_mlp.h"
#include "model/layers/linear.h"
#include "model/layers/logits_head.h"
#include "model/layers/paged_attention.h"
#include "model/layers/residual.h"
#include "model/layers/rms_norm.h"
#include "model/layers/rotary_embedding.h"
#include "model/layers/row_parallel_linear.h"
#include "model/model_config.h"
#include "model/model_family.h"
#include "model/weights.h"

namespace pagoda {
namespace {

struct LlamaLayer {
  RmsNorm input_norm;      // [hidden]
  RmsNorm post_attn_norm;  // [hidden]
  // q [heads*hd, hidden], k/v [kv_heads*hd, hidden] (biased in Qwen2 and Llama with
  // attention_bias), o [hidden, heads*hd] (biased with attention_bias)
  Linear q, k, v;
  RowParallelLinear o;
  GatedMlp mlp;  // gate/up [inter, hidden], down [hidden, inter] (biased with mlp_bias)
};

class LlamaModel final : public Model {
 public:
  LlamaModel(const ExecutionContext& ctx, const ModelConfig& config, const TensorStore& store,
             const ModelOptions& options);

  int64_t vocab_size() const override { return vocab_size_; }
  KvCacheSpec kv_cache_spec() const override;
  int64_t num_parameters() const override { return weights_.num_parameters(); }
  int64_t weight_bytes() const override { return weights_.weight_bytes(); }
  void forward(const ExecutionContext& ctx, const ForwardBatch& batch, KvCache& cache,
               float* logits) override;

 private:
  void reserve(const ExecutionContext& ctx, int64_t num_tokens);

  // num_heads_ and num_kv_heads_ are this rank's (all of them on one rank).
  int64_t hidden_, intermediate_, num_heads_, num_kv_heads_, head_dim_, vocab_size_;
  PipelineParallel pipeline_;
  LayerRange stage_layers_;  // every layer on one stage
  WeightLoader weights_;
  Embedding embed_;                 // first stage (and the last, whose head may be tied to it)
  std::vector<LlamaLayer> layers_;  // layers_[i] is layer stage_layers_.begin + i
  LogitsHead head_;
  RotaryEmbedding rope_;
  PagedAttention attention_;

  // Activations, sized for the largest batch seen (grown rarely, never per token). They grow
  // with the steps: sized for max_num_batched_tokens up front, a short run would pay for
  // zeroing and faulting in memory it never touches (200 MB at R1-Distill-Qwen-1.5B's shape,
  // 21 MB and most of the start-up of `generate --model demo` once its KV pool is small).
  Activation residual_, x_;  // [T, hidden]
  Activation q_, attn_;      // [T, heads*hd]     (this rank's heads)
  Activation k_, v_;         // [T, kv_heads*hd]  (this rank's KV heads)
  Activation gate_, up_;     // [T, inter]        (this rank's rows)
  RotaryRows rope_rows_;
  AttentionBatch attn_batch_;
};

LlamaModel::LlamaModel(const ExecutionContext& ctx, const ModelConfig& c, const TensorStore& store,
                       const ModelOptions& options)
    : hidden_(c.hidden_size),
      intermediate_(c.intermediate_size),
      num_heads_(options.tensor_parallel
                     .even_split(c.num_attention_heads, "attention heads (num_attention_heads)")
                     .count),
      num_kv_heads_(options.tensor_parallel
                        .even_split(c.num_key_value_heads, "KV heads (num_key_value_heads)")
                        .count),
      head_dim_(c.head_dim),
      vocab_size_(c.vocab_size),
      pipeline_(options.pipeline_parallel),
      stage_layers_(pipeline_.layers(c.num_hidden_layers)),
      weights_(store, options.weights, ctx),
      rope_(rope_params_from_config(c, c.head_dim)),
      attention_{static_cast<int32_t>(num_heads_),
                 1.0f / std::sqrt(static_cast<float>(c.head_dim))},
      residual_(c.hidden_size),
      x_(c.hidden_size),
      q_(num_heads_ * c.head_dim),
      attn_(num_heads_ * c.head_dim),
      k_(num_kv_heads_ * c.head_dim),
      v_(num_kv_heads_ * c.head_dim) {
  const TensorParallel& tp = options.tensor_parallel;
  const auto eps = static_cast<float>(c.rms_norm_eps);
  // The last stage loads the table too, as a view of the stored rows: a tied head multiplies
  // by it, and an untied one takes its vocabulary range (no page of it is read then).
  if (pipeline_.is_first() || pipeline_.is_last()) {
    embed_ =
        Embedding::load_sharded(weights_, "model.embed_tokens.weight", vocab_size_, hidden_, tp);
  }
  // Rows of q are heads * head_dim, of k and v kv_heads * head_dim: rank r's heads are rows
  // [r * heads/T * hd, ...), and its query heads map onto its KV heads as they would unsplit
  // (GQA groups never straddle ranks, since both head counts divide by T).
  const int64_t q_dim = c.num_attention_heads * head_dim_;
  const int64_t kv_dim = c.num_key_value_heads * head_dim_;
  const DimShard q_rows{tp.rank() * num_heads_ * head_dim_, num_heads_ * head_dim_};
  const DimShard kv_rows{tp.rank() * num_kv_heads_ * head_dim_, num_kv_heads_ * head_dim_};
  layers_.resize(static_cast<size_t>(stage_layers_.size()));
  for (int64_t i = 0; i < stage_layers_.size(); ++i) {
    LlamaLayer& l = layers_[static_cast<size_t>(i)];
    const std::string p = fmt::format("model.layers.{}.", stage_layers_.begin + i);
    l.input_norm = RmsNorm::load(weights_, p + "input_layernorm.weight", hidden_, eps);
    l.post_attn_norm = RmsNorm::load(weights_, p + "post_attention_layernorm.weight", hidden_, eps);
    l.q = Linear::load_rows(weights_, p + "self_attn.q_proj", q_dim, hidden_, q_rows,
                            c.attention_bias);
    l.k = Linear::load_rows(weights_, p + "self_attn.k_proj", kv_dim, hidden_, kv_rows,
                            c.attention_bias);
    l.v = Linear::load_rows(weights_, p + "self_attn.v_proj", kv_dim, hidden_, kv_rows,
                            c.attention_bias);
    l.o = RowParallelLinear::load(weights_, p + "self_attn.o_proj", hidden_, q_dim, tp,
                                  c.o_proj_bias);
    l.mlp = GatedMlp::load_sharded(weights_, p + "mlp.", hidden_, intermediate_, tp, c.mlp_bias);
  }
  gate_.set_row_size(layers_.empty() ? 0 : layers_.front().mlp.intermediate_size());
  up_.set_row_size(gate_.row_size());
  if (pipeline_.is_last())
    head_ = LogitsHead(weights_, embed_, c.tie_word_embeddings, vocab_size_, hidden_, eps, tp);
}

KvCacheSpec LlamaModel::kv_cache_spec() const {
  KvCacheSpec spec;
  spec.num_layers = static_cast<int32_t>(stage_layers_.size());  // this stage's
  spec.num_kv_heads = static_cast<int32_t>(num_kv_heads_);
  spec.k_head_dim = static_cast<int32_t>(head_dim_);
  spec.v_head_dim = static_cast<int32_t>(head_dim_);
  return spec;
}

void LlamaModel::reserve(const ExecutionContext& ctx, int64_t num_tokens) {
  for (Activation* a : {&residual_, &x_, &q_, &attn_, &k_, &v_, &gate_, &up_})
    a->reserve(ctx, num_tokens);
}

void LlamaModel::forward(const ExecutionContext& ctx, const ForwardBatch& batch, KvCache& cache,
                         float* logits) {
  const int64_t T = batch.num_tokens();
  reserve(ctx, T);
  float* h = residual_.data();
  float* x = x_.data();

  const auto h_bytes = static_cast<size_t>(T * hidden_) * sizeof(float);
  if (pipeline_.is_first()) {
    embed_.forward(ctx, batch.token_ids.data(), T, h);  // h [T, hidden]
  } else {
    pipeline_.from_previous()->receive(h, h_bytes);  // h after the previous stage's last layer
  }
  attn_batch_.assign(batch);
  // cos/sin depend only on the positions, so one set of rows serves every layer.
  const RopeRows rope = rope_rows_.compute(ctx, rope_, batch.positions.data(), T, /*neox=*/true);

  for (int64_t i = 0; i < stage_layers_.size(); ++i) {
    const LlamaLayer& l = layers_[static_cast<size_t>(i)];
    l.input_norm.forward(ctx, h, T, x);  // x = norm(h)
    // q [T, heads*hd], k and v [T, kv_heads*hd]: one parallel region for the three.
    const LinearCall qkv[] = {{&l.q, x, T, q_.data(), l.q.out_features()},
                              {&l.k, x, T, k_.data(), l.k.out_features()},
                              {&l.v, x, T, v_.data(), l.v.out_features()}};
    linear_batch(ctx, qkv);
    attention_.forward(ctx, rope, q_.data(), k_.data(), v_.data(),
                       cache.layer(static_cast<int32_t>(i)), attn_batch_, attn_.data());
    l.o.forward(ctx, attn_.data(), T, x);                   // x = o_proj(attn) [T, hidden]
    l.post_attn_norm.add_forward(ctx, h, x, T, x);          // h += x; x = norm(h)
    l.mlp.forward(ctx, x, T, gate_.data(), up_.data(), x);  // x = mlp(x) [T, hidden]
    add_residual(ctx, h, x, T * hidden_);                   // h += x
  }
  const auto logits_bytes =
      static_cast<size_t>(batch.num_logit_rows() * vocab_size_) * sizeof(float);
  if (!pipeline_.is_last()) {
    // Rank 0 takes the last stage's logits later, when the engine asks for this batch's output.
    pipeline_.to_next()->send(h, h_bytes);
    return;
  }
  head_.forward(ctx, batch, h, logits);  // [logit rows, vocab]
  if (pipeline_.logits() != nullptr && logits_bytes > 0)
    pipeline_.logits()->send(logits, logits_bytes);
}

}  // namespace

std::unique_ptr<Model> create_llama_model(const ExecutionContext& ctx, const ModelConfig& config,
                                          const TensorStore& store, const ModelOptions& options) {
  return std::make_unique<LlamaModel>(ctx, config, store, options);
}

}  // namespace pagoda
