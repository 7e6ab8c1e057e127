// The dense decoder family: LlamaForCausalLM (DeepSeek-LLM 7B/67B, DeepSeek-Coder,
// R1-Distill-Llama) and Qwen2ForCausalLM (R1-Distill-Qwen), which is the same graph with
// biases on q/k/v. Semantics follow Hugging Face's modeling_llama.py / modeling_qwen2.py:
//   h = embed(ids)
//   for each layer: h += o_proj(attn(rope(q(norm(h))), rope(k(norm(h))), v(norm(h))))
//                   h += down(silu(gate(norm(h))) * up(norm(h)))
//   logits = lm_head(norm(h))
#include <cmath>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "kernels/attention.h"
#include "kernels/ops.h"
#include "loader/safetensors.h"
#include "model/model_config.h"
#include "model/model_registry.h"
#include "model/rotary_embedding.h"
#include "model/weights.h"
#include "util/error.h"

namespace pagoda {
namespace {

struct LlamaLayer {
  std::vector<float> input_norm;      // [hidden]
  std::vector<float> post_attn_norm;  // [hidden]
  WeightView q, k, v, o;  // q [heads*hd, hidden], k/v [kv_heads*hd, hidden], o [hidden, heads*hd]
  std::vector<float> q_bias, k_bias, v_bias;  // Qwen2; Llama with attention_bias
  std::vector<float> o_bias;                  // Llama with attention_bias
  WeightView gate, up, down;                  // gate/up [inter, hidden], down [hidden, inter]
  std::vector<float> gate_bias, up_bias, down_bias;  // Llama with mlp_bias
};

class LlamaModel final : public Model {
 public:
  LlamaModel(const ModelConfig& config, const TensorStore& store, const ModelOptions& options);

  int64_t vocab_size() const override { return vocab_size_; }
  KvCacheSpec kv_cache_spec() const override;
  int64_t num_parameters() const override { return weights_.num_parameters(); }
  int64_t weight_bytes() const override { return weights_.weight_bytes(); }
  void forward(const ForwardBatch& batch, KvCache& cache, float* logits) override;

 private:
  void reserve(int64_t num_tokens);
  void add_bias(float* x, const std::vector<float>& bias, int64_t num_tokens) const;

  int64_t hidden_, intermediate_, num_layers_, num_heads_, num_kv_heads_, head_dim_, vocab_size_;
  WeightLoader weights_;
  float rms_eps_;
  float attn_scale_;
  WeightView embed_;
  std::vector<LlamaLayer> layers_;
  std::vector<float> final_norm_;
  WeightView lm_head_;
  RotaryEmbedding rope_;

  // Activations, sized for the largest batch seen (grown rarely, never per token).
  int64_t capacity_ = 0;
  std::vector<float> residual_, x_, q_, k_, v_, attn_, gate_, up_, rope_cos_, rope_sin_;
  std::vector<float> last_rows_;
  std::vector<AttentionSequence> attn_seqs_;
};

LlamaModel::LlamaModel(const ModelConfig& c, const TensorStore& store, const ModelOptions& options)
    : hidden_(c.hidden_size),
      intermediate_(c.intermediate_size),
      num_layers_(c.num_hidden_layers),
      num_heads_(c.num_attention_heads),
      num_kv_heads_(c.num_key_value_heads),
      head_dim_(c.head_dim),
      vocab_size_(c.vocab_size),
      weights_(store, options.weights),
      rms_eps_(static_cast<float>(c.rms_norm_eps)),
      attn_scale_(1.0f / std::sqrt(static_cast<float>(c.head_dim))),
      rope_(rope_params_from_config(c, c.head_dim)) {
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols) {
    return weights_.matrix(name, rows, cols);
  };
  auto vector = [&](const std::string& name, int64_t n) { return weights_.vector(name, n); };
  embed_ = weights_.matrix_as_stored("model.embed_tokens.weight", vocab_size_, hidden_);
  const int64_t q_dim = num_heads_ * head_dim_;
  const int64_t kv_dim = num_kv_heads_ * head_dim_;
  layers_.resize(static_cast<size_t>(num_layers_));
  for (int64_t i = 0; i < num_layers_; ++i) {
    LlamaLayer& l = layers_[static_cast<size_t>(i)];
    const std::string p = fmt::format("model.layers.{}.", i);
    l.input_norm = vector(p + "input_layernorm.weight", hidden_);
    l.post_attn_norm = vector(p + "post_attention_layernorm.weight", hidden_);
    l.q = matrix(p + "self_attn.q_proj.weight", q_dim, hidden_);
    l.k = matrix(p + "self_attn.k_proj.weight", kv_dim, hidden_);
    l.v = matrix(p + "self_attn.v_proj.weight", kv_dim, hidden_);
    l.o = matrix(p + "self_attn.o_proj.weight", hidden_, q_dim);
    if (c.attention_bias) {
      l.q_bias = vector(p + "self_attn.q_proj.bias", q_dim);
      l.k_bias = vector(p + "self_attn.k_proj.bias", kv_dim);
      l.v_bias = vector(p + "self_attn.v_proj.bias", kv_dim);
    }
    if (c.o_proj_bias) l.o_bias = vector(p + "self_attn.o_proj.bias", hidden_);
    l.gate = matrix(p + "mlp.gate_proj.weight", intermediate_, hidden_);
    l.up = matrix(p + "mlp.up_proj.weight", intermediate_, hidden_);
    l.down = matrix(p + "mlp.down_proj.weight", hidden_, intermediate_);
    if (c.mlp_bias) {
      l.gate_bias = vector(p + "mlp.gate_proj.bias", intermediate_);
      l.up_bias = vector(p + "mlp.up_proj.bias", intermediate_);
      l.down_bias = vector(p + "mlp.down_proj.bias", hidden_);
    }
  }
  final_norm_ = vector("model.norm.weight", hidden_);
  if (c.tie_word_embeddings && store.find("lm_head.weight") == nullptr) {
    lm_head_ = weights_.prepare(embed_, "lm_head.weight");
  } else {
    lm_head_ = matrix("lm_head.weight", vocab_size_, hidden_);
  }
  // The activations grow with the largest step seen (forward() reserves what it needs). Sized
  // for max_num_batched_tokens here, a short run would pay for zeroing and faulting in memory it
  // never touches: 200 MB at R1-Distill-Qwen-1.5B's shape, 21 MB and most of the start-up of
  // `generate --model demo` once its KV pool is small.
}

KvCacheSpec LlamaModel::kv_cache_spec() const {
  KvCacheSpec spec;
  spec.num_layers = static_cast<int32_t>(num_layers_);
  spec.num_kv_heads = static_cast<int32_t>(num_kv_heads_);
  spec.k_head_dim = static_cast<int32_t>(head_dim_);
  spec.v_head_dim = static_cast<int32_t>(head_dim_);
  return spec;
}

void LlamaModel::reserve(int64_t num_tokens) {
  if (num_tokens <= capacity_) return;
  capacity_ = num_tokens;
  const auto n = static_cast<size_t>(num_tokens);
  residual_.resize(n * hidden_);
  x_.resize(n * hidden_);
  q_.resize(n * num_heads_ * head_dim_);
  k_.resize(n * num_kv_heads_ * head_dim_);
  v_.resize(n * num_kv_heads_ * head_dim_);
  attn_.resize(n * num_heads_ * head_dim_);
  gate_.resize(n * intermediate_);
  up_.resize(n * intermediate_);
  rope_cos_.resize(n * head_dim_ / 2);
  rope_sin_.resize(n * head_dim_ / 2);
}

void LlamaModel::add_bias(float* x, const std::vector<float>& bias, int64_t num_tokens) const {
  if (bias.empty()) return;
  const int64_t n = static_cast<int64_t>(bias.size());
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t i = 0; i < n; ++i) x[t * n + i] += bias[static_cast<size_t>(i)];
  }
}

void LlamaModel::forward(const ForwardBatch& batch, KvCache& cache, float* logits) {
  const KernelTable& kt = kernels();
  const int64_t T = batch.num_tokens();
  reserve(T);

  ops::embedding_lookup(embed_, batch.token_ids.data(), T, residual_.data());  // h [T, hidden]

  attn_seqs_.clear();
  for (const ForwardSequence& s : batch.sequences) {
    attn_seqs_.push_back({s.token_begin, s.num_tokens, s.context_len, s.block_table});
  }
  // cos/sin depend only on the positions, so one set of rows serves every layer.
  rope_.cos_sin_rows(batch.positions.data(), T, rope_cos_.data(), rope_sin_.data());
  const RopeRows rope{rope_cos_.data(), rope_sin_.data(), rope_.rotary_dim(), /*neox=*/true};

  for (int64_t i = 0; i < num_layers_; ++i) {
    const LlamaLayer& l = layers_[static_cast<size_t>(i)];
    ops::rms_norm_rows(residual_.data(), l.input_norm.data(), rms_eps_, T, hidden_, x_.data());

    // q [T, heads*hd], k and v [T, kv_heads*hd]: one parallel region for the three.
    const ops::MatmulJob qkv[] = {{x_.data(), T, &l.q, q_.data(), l.q.rows},
                                  {x_.data(), T, &l.k, k_.data(), l.k.rows},
                                  {x_.data(), T, &l.v, v_.data(), l.v.rows}};
    ops::matmul_batch(qkv);
    add_bias(q_.data(), l.q_bias, T);
    add_bias(k_.data(), l.k_bias, T);
    add_bias(v_.data(), l.v_bias, T);

    const PagedKvLayer& layer_cache = cache.layer(static_cast<int32_t>(i));
    // Rotates q in place and k on its way into the cache.
    write_kv_rope(layer_cache, rope, q_.data(), static_cast<int32_t>(num_heads_), k_.data(),
                  v_.data(), batch.slot_mapping.data(), T);
    paged_attention(q_.data(), static_cast<int32_t>(num_heads_), layer_cache, attn_seqs_.data(),
                    static_cast<int32_t>(attn_seqs_.size()), attn_scale_, attn_.data());

    ops::matmul(attn_.data(), T, l.o, x_.data());  // [T, hidden]
    add_bias(x_.data(), l.o_bias, T);
    // h += o; x = norm(h)
    ops::add_rms_norm_rows(residual_.data(), x_.data(), l.post_attn_norm.data(), rms_eps_, T,
                           hidden_, x_.data());

    const ops::MatmulJob gate_up[] = {{x_.data(), T, &l.gate, gate_.data(), l.gate.rows},
                                      {x_.data(), T, &l.up, up_.data(), l.up.rows}};
    ops::matmul_batch(gate_up);  // [T, inter] each
    add_bias(gate_.data(), l.gate_bias, T);
    add_bias(up_.data(), l.up_bias, T);
    ops::silu_mul(gate_.data(), up_.data(), T * intermediate_, gate_.data());
    ops::matmul(gate_.data(), T, l.down, x_.data());  // [T, hidden]
    add_bias(x_.data(), l.down_bias, T);
    for (int64_t j = 0; j < T * hidden_; ++j)
      residual_[static_cast<size_t>(j)] += x_[static_cast<size_t>(j)];
  }

  // Only the rows that need logits (the sampled last row, or every row of a sequence asking for
  // prompt logprobs) go through the final norm and the vocabulary projection.
  const int64_t num_rows = batch.num_logit_rows();
  if (num_rows == 0) return;
  last_rows_.resize(static_cast<size_t>(num_rows * hidden_));
  int64_t r = 0;
  for (const ForwardSequence& s : batch.sequences) {
    const int64_t end = s.token_begin + s.num_tokens;
    for (int64_t row = end - s.num_logit_rows(); row < end; ++row, ++r) {
      kt.rms_norm(&residual_[static_cast<size_t>(row * hidden_)], final_norm_.data(), rms_eps_,
                  hidden_, &last_rows_[static_cast<size_t>(r * hidden_)]);
    }
  }
  ops::matmul(last_rows_.data(), num_rows, lm_head_, logits);  // [rows, vocab]
}

}  // namespace

std::unique_ptr<Model> create_llama_model(const ModelConfig& config, const TensorStore& store,
                                          const ModelOptions& options) {
  return std::make_unique<LlamaModel>(config, store, options);
}

}  // namespace pagoda
