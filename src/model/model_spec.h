// The shape of a Hugging Face checkpoint as the model generator (src/demo) builds one: the
// common sizes, and DeepSeek's MLA / mixture-of-experts keys. Each family turns a spec into
// its config.json and names its published shapes as specs (model/model_family.h,
// FamilyGenerator), so the generator holds nothing about any one family.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "util/dtype.h"

namespace pagoda {

// The DeepSeek-V2/V3 part of a spec (Multi-head Latent Attention and mixture of experts), with
// the names and meanings of the keys of their config.json (model/deepseek_config.h).
struct DeepseekSpec {
  int64_t q_lora_rank = 1536;  // 0: queries projected directly by q_proj (V2-Lite)
  int64_t kv_lora_rank = 512;
  int64_t qk_nope_head_dim = 128;
  int64_t qk_rope_head_dim = 64;
  int64_t v_head_dim = 128;
  int64_t n_routed_experts = 0;  // 0: every layer is a dense MLP
  int64_t n_shared_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  int64_t first_k_dense_replace = 0;
  int64_t moe_layer_freq = 1;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  std::string topk_method = "greedy";  // greedy, group_limited_greedy, noaux_tc
  std::string scoring_func = "softmax";
  bool norm_topk_prob = false;
  double routed_scaling_factor = 1.0;
  // Multi-token-prediction layers after the last decoder layer (V3's checkpoints carry one):
  // a full MoE decoder layer plus enorm, hnorm, eh_proj, embed_tokens and shared_head.
  int64_t num_nextn_predict_layers = 0;

  // HF's rule (modeling_deepseek.py); MTP layers (layer >= num_layers) are MoE when there are
  // experts, as in DeepSeek-V3.
  bool is_moe_layer(int64_t layer, int64_t num_layers) const {
    if (n_routed_experts == 0) return false;
    return layer >= num_layers || (layer >= first_k_dense_replace && layer % moe_layer_freq == 0);
  }
};

struct ModelSpec {
  std::string preset;  // informational; "" when built by hand
  // config.json's architectures[0]: any the registry lists (supported_architectures()).
  std::string architecture = "LlamaForCausalLM";
  int64_t hidden_size = 64;
  int64_t intermediate_size = 172;
  int64_t num_layers = 2;
  int64_t num_heads = 4;
  int64_t num_kv_heads = 2;
  int64_t head_dim = 0;  // 0: hidden_size / num_heads
  int64_t vocab_size = 512;
  int64_t max_position_embeddings = 2048;
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-6;
  nlohmann::json rope_scaling = nullptr;  // written to config.json as given
  bool tie_word_embeddings = false;
  DType dtype = DType::kBF16;
  int num_shards = 1;
  uint64_t seed = 0;
  std::string tokenizer_from;  // "" = the built-in tokenizer
  bool demo = false;           // adds config.json's "pagoda_demo" label
  DeepseekSpec deepseek;       // used by the DeepSeek architectures only

  int64_t effective_head_dim() const { return head_dim > 0 ? head_dim : hidden_size / num_heads; }
  // Whether the architecture is of the DeepSeek family, which reads `deepseek`.
  bool is_deepseek() const;
};

// config.json's torch_dtype for a generated checkpoint's weights.
const char* torch_dtype_name(DType dtype);

}  // namespace pagoda
