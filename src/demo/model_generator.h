// Writes complete Hugging Face model directories with random weights (config.json,
// generation_config.json, *.safetensors with an index when sharded, tokenizer.json,
// tokenizer_config.json) at any shape: for tests, benchmarks and the built-in `demo` model.
// The names and shapes it writes are the model family's table (model/model_family.h), which
// the loader and GGUF export read too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loader/safetensors_writer.h"
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
  // LlamaForCausalLM, Qwen2ForCausalLM, DeepseekV2ForCausalLM or DeepseekV3ForCausalLM.
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
  bool qkv_bias() const { return architecture == "Qwen2ForCausalLM"; }
  bool is_deepseek() const {
    return architecture == "DeepseekV2ForCausalLM" || architecture == "DeepseekV3ForCausalLM";
  }
};

// The architectures the generator writes.
std::vector<std::string> generator_architectures();

// tiny, demo, ds-coder-1.3b, ds-llm-7b, r1-distill-qwen-1.5b, deepseek-v2, deepseek-v2-lite,
// deepseek-v3 (the published config.json shapes), tiny-deepseek-v3 (V3's structure with an MTP
// layer at test size); throws pagoda::Error otherwise.
ModelSpec model_preset(const std::string& name);
std::vector<std::string> model_preset_names();

// Every weight tensor with its HF name and shape, in file order: the family's tensor_layout
// for the config.json that `spec` writes.
std::vector<TensorLayout> model_tensor_layout(const ModelSpec& spec);

struct GeneratedModel {
  std::string dir;
  int64_t num_parameters = 0;
  int64_t weight_bytes = 0;
  int64_t vocab_size = 0;            // in config.json (may exceed the spec's for --tokenizer-from)
  int64_t tokenizer_vocab_size = 0;  // ids the tokenizer uses
  std::vector<std::string> weight_files;
};

// Writes the directory `out_dir` (created if needed; existing model files are replaced).
// Deterministic for a given spec and seed, whatever the thread count. Throws pagoda::Error.
GeneratedModel generate_model(const ModelSpec& spec, const std::string& out_dir);

// The built-in demo model's directory: `cache_root`/pagoda/demo, generated on first use into
// a temporary directory and renamed into place, so concurrent first runs are safe. An empty
// `cache_root` means $XDG_CACHE_HOME, else $HOME/.cache.
std::string ensure_demo_model(const std::string& cache_root = "");

}  // namespace pagoda
