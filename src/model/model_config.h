// A model's hyperparameters, read from the Hugging Face `config.json` of a model directory.
// The common dense-decoder keys are parsed and validated here (LlamaForCausalLM,
// Qwen2ForCausalLM); the raw JSON is kept so other families read their own keys. Which
// architectures are supported is decided by the model registry, not here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/dtype.h"

namespace pagoda {

// `rope_scaling` as transformers spells it (`type` or `rope_type`); see layers/rotary_embedding.h.
struct RopeScalingConfig {
  std::string type = "default";  // default (also when null), linear, dynamic, yarn, llama3
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;          // 0 = not given
  double beta_fast = 32.0, beta_slow = 1.0;              // yarn
  double mscale = 0.0, mscale_all_dim = 0.0;             // yarn (DeepSeek); 0 = not given
  double attention_factor = 0.0;                         // yarn; 0 = not given
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
};

struct ModelConfig {
  std::string dir;           // the model directory
  std::string config_path;   // DIR/config.json, for error messages
  std::string architecture;  // architectures[0]
  std::string model_type;    // "llama", "qwen2", ... ("" if absent)

  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // default: num_attention_heads
  int64_t head_dim = 0;             // default: hidden_size / num_attention_heads
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScalingConfig rope_scaling;
  int64_t max_position_embeddings = 2048;
  int64_t vocab_size = 0;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v biases (always for Qwen2; Llama's `attention_bias`)
  bool o_proj_bias = false;     // Llama's `attention_bias` also adds one to o_proj; Qwen2 not
  bool mlp_bias = false;        // Llama's `mlp_bias`
  std::string hidden_act = "silu";
  DType torch_dtype = DType::kF32;      // `torch_dtype` (or newer `dtype`); weights keep theirs
  std::optional<int64_t> bos_token_id;  // a list keeps its first id
  std::vector<int64_t> eos_token_ids;   // int or list in the file; empty if null/absent

  nlohmann::json raw;  // the whole config.json

  // Reads DIR/config.json. Throws pagoda::Error "DIR/config.json: key 'X' ..." (or the file
  // problem) as one line.
  static ModelConfig from_dir(const std::string& dir);
  // Parses already-read JSON; `config_path` names it in errors.
  static ModelConfig from_json(const nlohmann::json& json, const std::string& config_path);

  int64_t q_size() const { return num_attention_heads * head_dim; }
  int64_t kv_size() const { return num_key_value_heads * head_dim; }
};

// Shared by config.json and generation_config.json: an id that may be an int, a list of ints
// or null. Throws "PATH: key 'KEY' ..." on anything else.
std::vector<int64_t> parse_token_id_list(const nlohmann::json& json, const std::string& key,
                                         const std::string& path);

// Reads a JSON file; throws "PATH: cannot open" / "PATH: not valid JSON: ..." (one line).
nlohmann::json read_json_file(const std::string& path);

}  // namespace pagoda
