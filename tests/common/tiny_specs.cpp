#include "common/tiny_specs.h"

#include <algorithm>

namespace pagoda::test {

ModelSpec tiny_spec(const std::string& architecture) {
  ModelSpec spec;
  spec.architecture = architecture;
  spec.hidden_size = 128;
  spec.intermediate_size = 256;
  spec.num_heads = 4;
  spec.vocab_size = 509;
  return spec;
}

void set_tiny_deepseek_shape(ModelSpec& spec) {
  const bool v3 = spec.architecture == "DeepseekV3ForCausalLM";
  spec.num_layers = 3;
  DeepseekSpec& d = spec.deepseek;
  d.q_lora_rank = v3 ? 64 : 0;
  d.kv_lora_rank = 64;
  d.qk_nope_head_dim = 32;
  d.qk_rope_head_dim = 16;
  d.v_head_dim = 32;
  d.n_routed_experts = 8;
  d.num_experts_per_tok = 2;
  d.first_k_dense_replace = 1;
  d.n_shared_experts = v3 ? 1 : 2;
  d.moe_intermediate_size = v3 ? 128 : 64;
  if (v3) {
    d.n_group = 4;
    d.topk_group = 2;
    d.topk_method = "noaux_tc";
    d.scoring_func = "sigmoid";
    d.norm_topk_prob = true;
    d.routed_scaling_factor = 2.5;
  }
}

ModelSpec tiny_deepseek_spec(const std::string& architecture) {
  ModelSpec spec = tiny_spec(architecture);
  set_tiny_deepseek_shape(spec);
  return spec;
}

void shrink_deepseek_shape(DeepseekSpec& d) {
  if (d.q_lora_rank > 0) d.q_lora_rank = 24;
  d.kv_lora_rank = 32;
  d.qk_nope_head_dim = 16;
  d.qk_rope_head_dim = 8;
  d.v_head_dim = 16;
  if (d.n_routed_experts > 0) {
    d.n_routed_experts = 8;
    d.num_experts_per_tok = 2;
    d.moe_intermediate_size = 32;
    d.first_k_dense_replace = std::min<int64_t>(d.first_k_dense_replace, 1);
    d.n_group = std::min<int64_t>(d.n_group, 4);
    d.topk_group = std::min<int64_t>(d.topk_group, 2);
  }
}

}  // namespace pagoda::test
