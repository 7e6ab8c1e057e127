// The DeepSeek-V2/V3 family: DeepseekV2ForCausalLM (V2, V2-Lite, V2.5) and
// DeepseekV3ForCausalLM (V3, R1). Semantics follow the published modeling_deepseek.py:
//   h = embed(ids)
//   for each layer:
//     h += mla_attention(norm(h))                  latent paged cache (layers/mla_attention.h)
//     h += mlp(norm(h))                            dense SwiGLU or MoE (layers/moe.h)
//   logits = lm_head(norm(h))
// and, loaded for speculative decoding only, V3's multi-token-prediction layer (the layer after
// the last; DeepSeek-V3 technical report §2.2, vLLM's deepseek_mtp.py), which drafts the token
// after next from the token after position i and the last layer's h at i:
//   g = eh_proj(concat(enorm(embed(next_ids)), hnorm(h)))      [T, 2 hidden] -> [T, hidden]
//   g = decoder layer (MLA + MoE) over g, in its own cache layer
//   logits = shared_head.head(shared_head.norm(g))
// This file only says which layers, in which order, on which tensors; the layers
// (model/layers/) do the work on the execution context they are given.
// Tensor parallel (ModelOptions::tensor_parallel): each rank holds num_heads/T attention heads
// over a whole latent cache (layers/mla_attention.h), E/T routed experts and a T-th of the
// shared experts' rows (expert parallel, layers/moe.h), inter/T rows of a dense layer's MLP, and
// a vocabulary range (embedding and lm_head). Attention, MLP and MoE each end in one all-reduce
// of [T, hidden].
// Pipeline parallel (ModelOptions::pipeline_parallel): each stage holds a contiguous range of
// layers (dense first_k_dense_replace layers and MoE layers alike, each keeping the kind its
// global index gives it) and their latent cache; the first stage embeds, the last runs the head,
// and h crosses from stage to stage (model/pipeline_parallel.h). The MTP layer follows the last
// layer's h, so it could only live on the last stage; speculation does not run under
// parallelism, and loading it on a pipeline is refused.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "loader/safetensors.h"
#include "model/deepseek_config.h"
#include "model/layers/activation.h"
#include "model/layers/attention_batch.h"
#include "model/layers/embedding.h"
#include "model/layers/gated_mlp.h"
#include "model/layers/logits_head.h"
#include "model/layers/mla_attention.h"
#include "model/layers/moe.h"
#include "model/layers/residual.h"
#include "model/layers/rms_norm.h"
#include "model/layers/rotary_embedding.h"
#include "model/model_config.h"
#include "model/model_family.h"
#include "model/weights.h"

namespace pagoda {
namespace {

struct DeepseekLayer {
  RmsNorm input_norm;      // [hidden]
  RmsNorm post_attn_norm;  // [hidden]
  MlaAttention attention;
  bool is_moe = false;
  GatedMlp dense;  // gate/up [inter, hidden], down [hidden, inter]
  MoeWeights moe;
};

// A multi-token-prediction layer: the decoder layer plus what joins its two inputs and its own
// head. Checkpoints store an embedding and a head per MTP layer (V3's equal the model's); one
// without them shares the model's.
struct MtpLayer {
  Embedding embed;
  RmsNorm enorm, hnorm;  // [hidden] each
  Linear eh_proj;        // [hidden, 2 hidden]: the normalised embedding first, then h
  DeepseekLayer block;
  LogitsHead head;  // shared_head.norm, shared_head.head
};

class DeepseekModel final : public Model {
 public:
  DeepseekModel(const ExecutionContext& ctx, const ModelConfig& config, const TensorStore& store,
                const ModelOptions& options);

  int64_t vocab_size() const override { return c_.vocab_size; }
  KvCacheSpec kv_cache_spec() const override;
  int64_t num_parameters() const override { return weights_.num_parameters(); }
  int64_t weight_bytes() const override { return weights_.weight_bytes(); }
  void forward(const ExecutionContext& ctx, const ForwardBatch& batch, KvCache& cache,
               float* logits) override;
  ExpertUsage last_forward_expert_usage() const override { return expert_usage_; }

  int32_t num_mtp_layers() const override { return static_cast<int32_t>(mtp_.size()); }
  int64_t hidden_size() const override { return c_.hidden_size; }
  std::span<const float> hidden_states() const override {
    return {residual_.data(), static_cast<size_t>(last_num_tokens_ * c_.hidden_size)};
  }
  void forward_mtp(const ExecutionContext& ctx, const ForwardBatch& batch,
                   const float* previous_hidden, KvCache& cache, float* logits,
                   float* hidden_out) override;

 private:
  void reserve(const ExecutionContext& ctx, int64_t num_tokens);
  DeepseekLayer load_layer(int64_t layer, bool is_moe);
  // h [T, hidden] += attention and MLP of `layer`, whose K/V live in `cache_layer`.
  void run_layer(const ExecutionContext& ctx, const DeepseekLayer& layer,
                 const PagedKvLayer& cache_layer, int64_t T);
  void load_mtp_layers(const ModelConfig& config, const TensorStore& store, bool load);
  ExpertMlp load_mlp(const std::string& prefix, int64_t inter);
  // This rank's intermediate rows of gate/up and columns of down (all of them on one rank).
  ExpertMlp load_mlp_sharded(const std::string& prefix, int64_t inter, const char* what);

  WeightView matrix(const std::string& name, int64_t rows, int64_t cols) {
    return weights_.matrix(name, rows, cols);
  }
  std::span<const float> vector(const std::string& name, int64_t n) {
    return weights_.vector(name, n);
  }

  DeepseekConfig c_;
  TensorParallel tp_;
  PipelineParallel pipeline_;
  LayerRange stage_layers_;                  // every layer on one stage
  MlaAttention::ExpandedForm mla_expanded_;  // from ModelOptions
  WeightLoader weights_;
  RotaryEmbedding rope_;
  Embedding embed_;
  std::vector<DeepseekLayer> layers_;  // layers_[i] is layer stage_layers_.begin + i
  LogitsHead head_;
  std::vector<MtpLayer> mtp_;  // the first MTP layer with ModelOptions::load_mtp_layers, or none

  // Activations, sized for the largest batch seen (grown rarely, never per token).
  Activation residual_, x_, mlp_out_;  // [T, hidden]
  MlaAttention::Activations attn_act_;
  RotaryRows rope_rows_;
  AttentionBatch attn_batch_;
  Activation gate_, up_;  // [T, inter] a dense layer's MLP
  Activation joined_;     // [T, 2 hidden] an MTP layer's eh_proj input
  int64_t last_num_tokens_ = 0;

  MoeDispatcher moe_;
  ExpertUsage expert_usage_;  // of the last forward()
};

ExpertMlp DeepseekModel::load_mlp(const std::string& p, int64_t inter) {
  ExpertMlp m;
  m.gate = matrix(p + "gate_proj.weight", inter, c_.hidden_size);
  m.up = matrix(p + "up_proj.weight", inter, c_.hidden_size);
  m.down = matrix(p + "down_proj.weight", c_.hidden_size, inter);
  return m;
}

ExpertMlp DeepseekModel::load_mlp_sharded(const std::string& p, int64_t inter, const char* what) {
  if (!tp_.enabled()) return load_mlp(p, inter);
  const DimShard rows = tp_.even_split(inter, what);
  const int64_t hidden = c_.hidden_size;
  ExpertMlp m;
  m.gate = weights_.matrix_rows(p + "gate_proj.weight", inter, hidden, rows.first, rows.count);
  m.up = weights_.matrix_rows(p + "up_proj.weight", inter, hidden, rows.first, rows.count);
  m.down = weights_.matrix_columns(p + "down_proj.weight", hidden, inter, rows.first, rows.count);
  return m;
}

DeepseekModel::DeepseekModel(const ExecutionContext& ctx, const ModelConfig& config,
                             const TensorStore& store, const ModelOptions& options)
    : c_(DeepseekConfig::from_model_config(config)),
      tp_(options.tensor_parallel),
      pipeline_(options.pipeline_parallel),
      stage_layers_(pipeline_.layers(c_.num_layers)),
      mla_expanded_{options.mla_expanded_min_tokens, options.mla_expanded_scratch_bytes},
      weights_(store, options.weights, ctx),
      rope_(c_.rope),
      residual_(c_.hidden_size),
      x_(c_.hidden_size),
      mlp_out_(c_.hidden_size),
      gate_(c_.intermediate_size),
      up_(c_.intermediate_size),
      joined_(2 * c_.hidden_size) {
  // The last stage loads the table too, as a view of the stored rows: a tied head multiplies
  // by it, and an untied one takes its vocabulary range (no page of it is read then).
  if (pipeline_.is_first() || pipeline_.is_last()) {
    embed_ = Embedding::load_sharded(weights_, "model.embed_tokens.weight", c_.vocab_size,
                                     c_.hidden_size, tp_);
  }
  layers_.reserve(static_cast<size_t>(stage_layers_.size()));
  for (int64_t i = stage_layers_.begin; i < stage_layers_.end; ++i)
    layers_.push_back(load_layer(i, c_.is_moe_layer(i)));
  if (pipeline_.is_last()) {
    head_ = LogitsHead(weights_, embed_, c_.tie_word_embeddings, c_.vocab_size, c_.hidden_size,
                       c_.rms_norm_eps, tp_);
  }
  load_mtp_layers(config, store, options.load_mtp_layers);

  // The activations (and the MoE dispatcher's buffers) grow with the largest step seen:
  // forward() reserves what it needs. Sized for max_num_batched_tokens here, a short run would
  // pay for zeroing and faulting in memory it never touches (~0.5 GB at V2-Lite's shape).
}

DeepseekLayer DeepseekModel::load_layer(int64_t i, bool is_moe) {
  DeepseekLayer l;
  const std::string p = fmt::format("model.layers.{}.", i);
  l.input_norm =
      RmsNorm::load(weights_, p + "input_layernorm.weight", c_.hidden_size, c_.rms_norm_eps);
  l.post_attn_norm = RmsNorm::load(weights_, p + "post_attention_layernorm.weight", c_.hidden_size,
                                   c_.rms_norm_eps);
  l.attention = MlaAttention(weights_, p + "self_attn.", c_, tp_, mla_expanded_);
  l.is_moe = is_moe;
  if (!l.is_moe) {
    l.dense =
        GatedMlp::load_sharded(weights_, p + "mlp.", c_.hidden_size, c_.intermediate_size, tp_);
    return l;
  }
  const MoeRouterConfig& r = c_.router;
  l.moe.router = weights_.matrix_as_stored(p + "mlp.gate.weight", r.num_experts, c_.hidden_size);
  if (r.method == MoeTopkMethod::kNoauxTc) {
    l.moe.score_bias = vector(p + "mlp.gate.e_score_correction_bias", r.num_experts);
  }
  // Whole experts per rank: no expert's matrices are cut, so every format shards as is.
  const DimShard experts = tp_.even_split(r.num_experts, "routed experts (n_routed_experts)");
  l.moe.first_expert = static_cast<int32_t>(experts.first);
  for (int64_t e = experts.first; e < experts.first + experts.count; ++e) {
    l.moe.experts.push_back(
        load_mlp(fmt::format("{}mlp.experts.{}.", p, e), c_.moe_intermediate_size));
  }
  if (c_.num_shared_experts > 0) {
    l.moe.has_shared = true;
    l.moe.shared = load_mlp_sharded(
        p + "mlp.shared_experts.", c_.moe_intermediate_size * c_.num_shared_experts,
        "shared-expert rows (moe_intermediate_size x n_shared_experts)");
  }
  l.moe.reduce = tp_.reducer();
  return l;
}

void DeepseekModel::load_mtp_layers(const ModelConfig& config, const TensorStore& store,
                                    bool load) {
  // The checkpoint's layers after num_hidden_layers, counted by their tensors: config.json's
  // num_nextn_predict_layers says how many there should be, the files say how many there are.
  int64_t num_mtp_tensors = 0;
  for (const auto& [name, tensor] : store.tensors()) {
    if (name.rfind("model.layers.", 0) != 0) continue;
    const int64_t index = std::atoll(name.c_str() + std::strlen("model.layers."));
    if (index >= c_.num_layers) ++num_mtp_tensors;
  }
  if (!load) {
    if (num_mtp_tensors > 0 || c_.num_nextn_predict_layers > 0) {
      spdlog::info(
          "{}: skipping {} multi-token-prediction layer(s) ({} tensors from model.layers.{}.); "
          "--speculative-config '{{\"method\": \"mtp\", ...}}' uses them",
          config.config_path, c_.num_nextn_predict_layers, num_mtp_tensors, c_.num_layers);
    }
    return;
  }
  if (tp_.enabled() || pipeline_.enabled()) {
    fail("{}: speculative method \"mtp\" does not run under tensor or pipeline parallelism yet",
         config.config_path);
  }
  if (c_.num_nextn_predict_layers == 0 || num_mtp_tensors == 0) {
    fail(
        "{}: speculative method \"mtp\" needs multi-token-prediction layers, but the model has "
        "none (num_nextn_predict_layers = {}, {} tensors after model.layers.{})",
        config.config_path, c_.num_nextn_predict_layers, num_mtp_tensors, c_.num_layers - 1);
  }
  // V3's MTP layer is MoE whenever the model has experts (its index is past every dense one).
  // Only the first is loaded: drafting k tokens runs it k times (as vLLM does with V3's one
  // layer); no published checkpoint has a second.
  const bool moe = c_.router.num_experts > 0;
  {
    const int64_t index = c_.num_layers;
    const std::string p = fmt::format("model.layers.{}.", index);
    MtpLayer l;
    l.embed =
        store.find(p + "embed_tokens.weight") != nullptr
            ? Embedding::load(weights_, p + "embed_tokens.weight", c_.vocab_size, c_.hidden_size)
            : embed_;
    l.enorm = RmsNorm::load(weights_, p + "enorm.weight", c_.hidden_size, c_.rms_norm_eps);
    l.hnorm = RmsNorm::load(weights_, p + "hnorm.weight", c_.hidden_size, c_.rms_norm_eps);
    l.eh_proj = Linear::load(weights_, p + "eh_proj", c_.hidden_size, 2 * c_.hidden_size);
    l.block = load_layer(index, moe);
    const bool own_head = store.find(p + "shared_head.head.weight") != nullptr;
    l.head = LogitsHead(weights_, l.embed, c_.tie_word_embeddings && !own_head, c_.vocab_size,
                        c_.hidden_size, c_.rms_norm_eps, {}, p + "shared_head.norm.weight",
                        own_head ? p + "shared_head.head" : "lm_head");
    mtp_.push_back(std::move(l));
  }
  spdlog::info("{}: loaded {} multi-token-prediction layer(s) for speculative decoding",
               config.config_path, mtp_.size());
}

KvCacheSpec DeepseekModel::kv_cache_spec() const {
  // One latent vector per token and layer, shared by all heads: never expanded K/V.
  KvCacheSpec spec;
  // This stage's layers; the MTP layer's comes after the last (one stage only).
  spec.num_layers = static_cast<int32_t>(stage_layers_.size() + num_mtp_layers());
  spec.num_kv_heads = 1;
  spec.k_head_dim = static_cast<int32_t>(c_.latent_dim());
  spec.v_head_dim = 0;
  return spec;
}

void DeepseekModel::reserve(const ExecutionContext& ctx, int64_t num_tokens) {
  for (Activation* a : {&residual_, &x_, &mlp_out_, &gate_, &up_}) a->reserve(ctx, num_tokens);
  if (!mtp_.empty()) joined_.reserve(ctx, num_tokens);
  attn_act_.reserve(ctx, c_, layers_.empty() ? 0 : layers_.front().attention.num_heads(),
                    num_tokens);
}

void DeepseekModel::run_layer(const ExecutionContext& ctx, const DeepseekLayer& l,
                              const PagedKvLayer& cache_layer, int64_t T) {
  const int64_t hidden = c_.hidden_size;
  float* h = residual_.data();
  float* x = x_.data();
  float* mlp_out = mlp_out_.data();
  l.input_norm.forward(ctx, h, T, x);  // x = norm(h)
  l.attention.forward(ctx, x, rope_rows_, cache_layer, attn_batch_, attn_act_,
                      x);                               // x = attention(x)
  l.post_attn_norm.add_forward(ctx, h, x, T, mlp_out);  // h += x; mlp_out = norm(h)
  std::memcpy(x, mlp_out, static_cast<size_t>(T * hidden) * sizeof(float));
  if (l.is_moe) {
    moe_.forward(ctx, c_.router, l.moe, x, T, mlp_out);  // [T, hidden]
  } else {
    l.dense.forward(ctx, x, T, gate_.data(), up_.data(), mlp_out);
  }
  add_residual(ctx, h, mlp_out, T * hidden);  // h += mlp
}

void DeepseekModel::forward(const ExecutionContext& ctx, const ForwardBatch& batch, KvCache& cache,
                            float* logits) {
  const int64_t T = batch.num_tokens();
  reserve(ctx, T);
  float* h = residual_.data();
  const auto h_bytes = static_cast<size_t>(T * c_.hidden_size) * sizeof(float);
  if (pipeline_.is_first()) {
    embed_.forward(ctx, batch.token_ids.data(), T, h);  // h [T, hidden]
  } else {
    pipeline_.from_previous()->receive(h, h_bytes);  // h after the previous stage's last layer
  }
  attn_batch_.assign(batch);
  // cos/sin depend only on the positions, so one set of rows serves every layer's attention.
  rope_rows_.compute(ctx, rope_, batch.positions.data(), T, /*neox=*/false);
  expert_usage_ = {};
  for (size_t i = 0; i < layers_.size(); ++i) {
    const DeepseekLayer& layer = layers_[i];
    run_layer(ctx, layer, cache.layer(static_cast<int32_t>(i)), T);
    if (layer.is_moe) {
      ++expert_usage_.num_moe_layers;
      expert_usage_.num_routed_experts += moe_.last_num_routed_experts();
    }
  }
  const auto logits_bytes =
      static_cast<size_t>(batch.num_logit_rows() * c_.vocab_size) * sizeof(float);
  if (!pipeline_.is_last()) {
    // Rank 0 takes the last stage's logits later, when the engine asks for this batch's output.
    pipeline_.to_next()->send(h, h_bytes);
    return;
  }
  last_num_tokens_ = T;                  // h is what hidden_states() hands to an MTP proposer
  head_.forward(ctx, batch, h, logits);  // [logit rows, vocab]
  if (pipeline_.logits() != nullptr && logits_bytes > 0)
    pipeline_.logits()->send(logits, logits_bytes);
}

void DeepseekModel::forward_mtp(const ExecutionContext& ctx, const ForwardBatch& batch,
                                const float* previous_hidden, KvCache& cache, float* logits,
                                float* hidden_out) {
  if (mtp_.empty()) fail("forward_mtp: the model was loaded without its MTP layers");
  MtpLayer& l = mtp_.front();
  const int64_t T = batch.num_tokens();
  const int64_t hidden = c_.hidden_size;
  reserve(ctx, T);
  float* h = residual_.data();
  float* x = x_.data();
  float* joined = joined_.data();
  l.embed.forward(ctx, batch.token_ids.data(), T, x);  // x [T, hidden]
  for (int64_t t = 0; t < T; ++t) {
    l.enorm.forward_row(ctx, x + t * hidden, joined + t * 2 * hidden);
    l.hnorm.forward_row(ctx, previous_hidden + t * hidden, joined + t * 2 * hidden + hidden);
  }
  l.eh_proj.forward(ctx, joined, T, h);  // h [T, hidden]
  attn_batch_.assign(batch);
  rope_rows_.compute(ctx, rope_, batch.positions.data(), T, /*neox=*/false);
  run_layer(ctx, l.block, cache.layer(static_cast<int32_t>(layers_.size())), T);
  std::memcpy(hidden_out, h, static_cast<size_t>(T * hidden) * sizeof(float));
  last_num_tokens_ = 0;  // h no longer holds the decoder's states
  l.head.forward(ctx, batch, h, logits);
}

}  // namespace

std::unique_ptr<Model> create_deepseek_model(const ExecutionContext& ctx, const ModelConfig& config,
                                             const TensorStore& store,
                                             const ModelOptions& options) {
  return std::make_unique<DeepseekModel>(ctx, config, store, options);
}

}  // namespace pagoda
