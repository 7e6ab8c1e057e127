// The DeepSeek-V2/V3/R1 hyperparameters that the common ModelConfig does not know: Multi-head
// Latent Attention (MLA) ranks and head dims, the mixture-of-experts layout and router, and
// the softmax-scale correction that comes with YaRN. Read from ModelConfig::raw with the
// defaults of the published configuration_deepseek.py (DeepseekV2Config / DeepseekV3Config).
#pragma once

#include <cstdint>
#include <string>

#include "model/layers/rotary_embedding.h"

namespace pagoda {

struct ModelConfig;

enum class MoeScoring { kSoftmax, kSigmoid };
// greedy: plain top-k. group_limited_greedy (V2): keep the topk_group groups with the best
// single expert score. noaux_tc (V3): keep the groups with the best sum of their two best
// bias-corrected scores, choose experts by bias-corrected score, weight by the raw score.
enum class MoeTopkMethod { kGreedy, kGroupLimitedGreedy, kNoauxTc };

struct MoeRouterConfig {
  int32_t num_experts = 0;  // n_routed_experts
  int32_t top_k = 0;        // num_experts_per_tok
  int32_t num_groups = 1;   // n_group
  int32_t topk_groups = 1;  // topk_group
  MoeScoring scoring = MoeScoring::kSoftmax;
  MoeTopkMethod method = MoeTopkMethod::kGreedy;
  bool norm_topk_prob = false;
  float routed_scaling_factor = 1.0f;
  // DeepSeek-V2's gate multiplies by routed_scaling_factor only when it does not normalise;
  // V3's gate normalises (if asked) and then always scales. Both as published.
  bool scale_after_norm = true;
};

struct DeepseekConfig {
  // Shape shared with the dense family.
  int64_t hidden_size = 0;
  int64_t num_layers = 0;  // num_hidden_layers; MTP layers beyond it are not run
  int64_t num_heads = 0;
  int64_t vocab_size = 0;
  float rms_norm_eps = 1e-6f;
  bool tie_word_embeddings = false;

  // MLA. q_lora_rank 0 = queries are projected directly (q_proj), as in V2-Lite.
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  float softmax_scale = 0.0f;  // (nope + rope)^-0.5 x yarn_get_mscale(factor, mscale_all_dim)^2
  RopeParams rope;             // rotary_dim = qk_rope_head_dim

  // Feed-forward: dense layers use intermediate_size; MoE layers n_routed_experts experts of
  // moe_intermediate_size plus one shared MLP of n_shared_experts x moe_intermediate_size.
  int64_t intermediate_size = 0;
  int64_t moe_intermediate_size = 0;
  int64_t num_shared_experts = 0;
  int64_t first_k_dense_replace = 0;
  int64_t moe_layer_freq = 1;
  MoeRouterConfig router;  // num_experts 0 = no MoE at all

  int64_t num_nextn_predict_layers = 0;  // V3/R1 multi-token-prediction layers (skipped)

  int64_t q_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  // What one token occupies in one layer's cache: the normalised latent and the rotated k_pe.
  int64_t latent_dim() const { return kv_lora_rank + qk_rope_head_dim; }
  // HF: `n_routed_experts is not None and layer_idx >= first_k_dense_replace and
  // layer_idx % moe_layer_freq == 0`.
  bool is_moe_layer(int64_t layer) const {
    return router.num_experts > 0 && layer >= first_k_dense_replace && layer % moe_layer_freq == 0;
  }

  // Throws pagoda::Error "CONFIG_PATH: key 'K' ..." naming the offending key.
  static DeepseekConfig from_model_config(const ModelConfig& config);
};

const char* moe_topk_method_name(MoeTopkMethod method);

}  // namespace pagoda
