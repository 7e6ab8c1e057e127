// The dense decoder family, described once (model/model_family.h): LlamaForCausalLM
// (DeepSeek-LLM 7B/67B, DeepSeek-Coder, R1-Distill-Llama) and Qwen2ForCausalLM (R1-Distill-Qwen),
// written to GGUF as llama.cpp's "llama" and "qwen2". The graph is llama_model.cpp. Metadata keys
// and tensor names are llama.cpp's (gguf-py/gguf/constants.py), mapped to what
// convert_hf_to_gguf.py reads them from; config.json keys are transformers' LlamaConfig and
// Qwen2Config.
#include <cmath>
#include <numbers>

#include <fmt/format.h>

#include "loader/gguf_writer.h"
#include "loader/safetensors.h"
#include "model/model_config.h"
#include "model/model_family.h"
#include "model/model_spec.h"
#include "util/error.h"

namespace pagoda {

const FamilyTensorNames& dense_tensor_names() {
  static constexpr TensorName kLayer[] = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_q.bias", "self_attn.q_proj.bias"},
      {"attn_k.bias", "self_attn.k_proj.bias"},
      {"attn_v.bias", "self_attn.v_proj.bias"},
      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"attn_output.bias", "self_attn.o_proj.bias"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"},
  };
  static const FamilyTensorNames kNames{kLayer, causal_lm_global_tensor_names()};
  return kNames;
}

namespace {

using nlohmann::json;

// ---- GGUF import ---------------------------------------------------------------------------

// Llama 3.x stores its rope scaling only as the `rope_freqs` tensor (one divisor per
// frequency, convert_hf_to_gguf's generate_extra_tensors). Find the HF llama3 parameters that
// produce it; the grid covers the released Llama 3.1/3.2/3.3 configs.
json llama3_rope_scaling(const GgufFile& file, const GgufTensorInfo& freqs, double theta,
                         int64_t rotary_dim) {
  if (freqs.type != ggml_type::kF32 || freqs.num_elements() != rotary_dim / 2) {
    fail("{}: tensor rope_freqs.weight must be F32 [{}], got {} {}", file.path(), rotary_dim / 2,
         ggml_type_name(freqs.type), format_shape(freqs.shape()));
  }
  const float* stored = reinterpret_cast<const float*>(freqs.data);
  float factor = 1;
  for (int64_t i = 0; i < rotary_dim / 2; ++i) factor = std::max(factor, stored[i]);
  for (double original : {8192.0, 4096.0, 16384.0, 32768.0, 131072.0}) {
    for (double low : {1.0, 2.0}) {
      for (double high : {4.0, 8.0}) {
        bool match = true;
        for (int64_t i = 0; i < rotary_dim / 2 && match; ++i) {
          const double freq = 1.0 / std::pow(theta, 2.0 * i / rotary_dim);
          const double wavelen = 2 * std::numbers::pi / freq;
          double want = 1;
          if (wavelen > original / low) {
            want = factor;
          } else if (wavelen >= original / high) {
            const double smooth = (original / wavelen - low) / (high - low);
            want = 1 / ((1 - smooth) / factor + smooth);
          }
          match = std::fabs(want - stored[i]) <= 1e-3 * want;
        }
        if (match) {
          return {{"rope_type", "llama3"},
                  {"factor", factor},
                  {"low_freq_factor", low},
                  {"high_freq_factor", high},
                  {"original_max_position_embeddings", static_cast<int64_t>(original)}};
        }
      }
    }
  }
  fail(
      "{}: tensor rope_freqs.weight does not match Llama 3 rope scaling for any known "
      "original context / frequency factors",
      file.path());
}

// llama and qwen2: one head size for q, k and v, rotated whole.
void add_dense_config(const GgufFile& file, json& c, const char* hf_architecture,
                      const std::string& a) {
  auto key = [&](const char* suffix) { return a + "." + suffix; };
  const int64_t hidden = c["hidden_size"].get<int64_t>();
  const int64_t heads = c["num_attention_heads"].get<int64_t>();
  c["architectures"] = {hf_architecture};
  c["model_type"] = a;
  c["num_key_value_heads"] = file.find_int(key("attention.head_count_kv")).value_or(heads);
  if (heads <= 0 || hidden % heads != 0) {
    fail("{}: {} = {} does not divide {} = {}", file.path(), key("attention.head_count"), heads,
         key("embedding_length"), hidden);
  }
  const int64_t head_dim = file.find_int(key("attention.key_length")).value_or(hidden / heads);
  c["head_dim"] = head_dim;
  if (const auto v = file.find_int(key("attention.value_length")); v && *v != head_dim) {
    fail("{}: {} = {} differs from the key length {}; Pagoda's {} model needs them equal",
         file.path(), key("attention.value_length"), *v, head_dim, a);
  }
  if (const auto rot = file.find_int(key("rope.dimension_count")); rot && *rot != head_dim) {
    fail("{}: {} = {}, but partial rotary embeddings (head size {}) are not supported for {}",
         file.path(), key("rope.dimension_count"), *rot, head_dim, a);
  }
  if (const GgufTensorInfo* freqs = file.find_tensor("rope_freqs.weight")) {
    c["rope_scaling"] = llama3_rope_scaling(file, *freqs, c["rope_theta"].get<double>(), head_dim);
  }
}

void add_llama_config(const GgufFile& file, json& c) {
  add_dense_config(file, c, "LlamaForCausalLM", "llama");
  // Llama's attention_bias also means an o_proj bias; what the file has decides.
  c["attention_bias"] = file.find_tensor("blk.0.attn_q.bias") != nullptr;
  c["mlp_bias"] = false;
}

void add_qwen2_config(const GgufFile& file, json& c) {
  add_dense_config(file, c, "Qwen2ForCausalLM", "qwen2");
}

// ---- GGUF export ---------------------------------------------------------------------------

// Export, the inverse of add_dense_config: one head size for q, k and v, rotated whole.
void add_dense_hparams(GgufWriter& w, const ModelConfig& c, const std::string& arch) {
  auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
  add_common_gguf_hparams(w, c, arch);
  w.set_u32(arch + ".attention.head_count_kv", u32(c.num_key_value_heads));
  w.set_u32(arch + ".attention.key_length", u32(c.head_dim));
  w.set_u32(arch + ".attention.value_length", u32(c.head_dim));
  w.set_u32(arch + ".rope.dimension_count", u32(c.head_dim));
}

void add_llama_hparams(GgufWriter& w, const ModelConfig& c) {
  add_dense_hparams(w, c, "llama");
}

void add_qwen2_hparams(GgufWriter& w, const ModelConfig& c) {
  add_dense_hparams(w, c, "qwen2");
}

// ---- tensors -------------------------------------------------------------------------------

// Names and shapes as transformers' LlamaForCausalLM / Qwen2ForCausalLM save them.
std::vector<TensorLayout> dense_tensor_layout(const ModelConfig& c, const std::string& dtype) {
  const int64_t hidden = c.hidden_size, inter = c.intermediate_size;
  const int64_t q_size = c.num_attention_heads * c.head_dim;
  const int64_t kv_size = c.num_key_value_heads * c.head_dim;
  std::vector<TensorLayout> t;
  t.push_back({"model.embed_tokens.weight", dtype, {c.vocab_size, hidden}});
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    const std::string p = fmt::format("model.layers.{}.", layer);
    t.push_back({p + "input_layernorm.weight", dtype, {hidden}});
    t.push_back({p + "self_attn.q_proj.weight", dtype, {q_size, hidden}});
    t.push_back({p + "self_attn.k_proj.weight", dtype, {kv_size, hidden}});
    t.push_back({p + "self_attn.v_proj.weight", dtype, {kv_size, hidden}});
    if (c.attention_bias) {
      t.push_back({p + "self_attn.q_proj.bias", dtype, {q_size}});
      t.push_back({p + "self_attn.k_proj.bias", dtype, {kv_size}});
      t.push_back({p + "self_attn.v_proj.bias", dtype, {kv_size}});
    }
    t.push_back({p + "self_attn.o_proj.weight", dtype, {hidden, q_size}});
    if (c.o_proj_bias) t.push_back({p + "self_attn.o_proj.bias", dtype, {hidden}});
    t.push_back({p + "post_attention_layernorm.weight", dtype, {hidden}});
    t.push_back({p + "mlp.gate_proj.weight", dtype, {inter, hidden}});
    t.push_back({p + "mlp.up_proj.weight", dtype, {inter, hidden}});
    t.push_back({p + "mlp.down_proj.weight", dtype, {hidden, inter}});
    if (c.mlp_bias) {
      t.push_back({p + "mlp.gate_proj.bias", dtype, {inter}});
      t.push_back({p + "mlp.up_proj.bias", dtype, {inter}});
      t.push_back({p + "mlp.down_proj.bias", dtype, {hidden}});
    }
  }
  t.push_back({"model.norm.weight", dtype, {hidden}});
  if (!c.tie_word_embeddings) t.push_back({"lm_head.weight", dtype, {c.vocab_size, hidden}});
  return t;
}

// ---- pagoda info ---------------------------------------------------------------------------

std::string describe_dense(const ModelConfig& c) {
  return fmt::format(
      "attention heads:    {} (kv heads {}, head dim {})\n"
      "intermediate size:  {}\n",
      c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.intermediate_size);
}

// ---- the model generator -------------------------------------------------------------------

// config.json as transformers' LlamaConfig / Qwen2Config save it: the keys both write, then
// `extra` adds the architecture's own.
json dense_generator_config(const ModelSpec& s, int64_t vocab_size, const char* model_type) {
  return {
      {"architectures", {s.architecture}},
      {"model_type", model_type},
      {"hidden_size", s.hidden_size},
      {"intermediate_size", s.intermediate_size},
      {"num_hidden_layers", s.num_layers},
      {"num_attention_heads", s.num_heads},
      {"num_key_value_heads", s.num_kv_heads},
      {"hidden_act", "silu"},
      {"max_position_embeddings", s.max_position_embeddings},
      {"rms_norm_eps", s.rms_norm_eps},
      {"rope_theta", s.rope_theta},
      {"rope_scaling", s.rope_scaling},
      {"tie_word_embeddings", s.tie_word_embeddings},
      {"torch_dtype", torch_dtype_name(s.dtype)},
      {"vocab_size", vocab_size},
      {"initializer_range", 0.02},
      {"attention_dropout", 0.0},
      {"use_cache", true},
      {"pagoda_generator", {{"preset", s.preset}, {"seed", s.seed}}},
  };
}

json llama_generator_config(const ModelSpec& s, int64_t vocab_size) {
  json c = dense_generator_config(s, vocab_size, "llama");
  c["head_dim"] = s.effective_head_dim();
  c["attention_bias"] = false;
  c["mlp_bias"] = false;
  c["pretraining_tp"] = 1;
  return c;
}

json qwen2_generator_config(const ModelSpec& s, int64_t vocab_size) {
  json c = dense_generator_config(s, vocab_size, "qwen2");
  c["use_sliding_window"] = false;
  c["sliding_window"] = s.max_position_embeddings;
  c["max_window_layers"] = s.num_layers;
  if (s.head_dim != 0) c["head_dim"] = s.head_dim;
  return c;
}

// The KV heads are the dense family's own (MLA derives them), so their checks are here too.
void check_dense_spec(ModelSpec& s, const std::string&) {
  if (s.num_kv_heads <= 0)
    fail("make-model: --num-kv-heads must be positive, got {}", s.num_kv_heads);
  if (s.head_dim < 0) fail("make-model: --head-dim must be positive, got {}", s.head_dim);
  if (s.head_dim == 0 && s.hidden_size % s.num_heads != 0) {
    fail("make-model: --num-heads {} does not divide --hidden-size {}", s.num_heads, s.hidden_size);
  }
  if (s.num_heads % s.num_kv_heads != 0) {
    fail("make-model: --num-kv-heads {} does not divide --num-heads {}", s.num_kv_heads,
         s.num_heads);
  }
  if (s.effective_head_dim() % 2 != 0) {
    fail("make-model: head dim {} must be even for RoPE", s.effective_head_dim());
  }
}

// deepseek-ai/deepseek-coder-1.3b-base config.json
ModelSpec ds_coder_1_3b() {
  ModelSpec s;
  s.hidden_size = 2048;
  s.intermediate_size = 5504;
  s.num_layers = 24;
  s.num_heads = 16;
  s.num_kv_heads = 16;
  s.vocab_size = 32256;
  s.max_position_embeddings = 16384;
  s.rope_theta = 100000.0;
  s.rope_scaling = {{"type", "linear"}, {"factor", 4.0}};
  s.dtype = DType::kBF16;
  return s;
}

// deepseek-ai/deepseek-llm-7b-base config.json
ModelSpec ds_llm_7b() {
  ModelSpec s;
  s.hidden_size = 4096;
  s.intermediate_size = 11008;
  s.num_layers = 30;
  s.num_heads = 32;
  s.num_kv_heads = 32;
  s.vocab_size = 102400;
  s.max_position_embeddings = 4096;
  s.dtype = DType::kBF16;
  return s;
}

// deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B config.json
ModelSpec r1_distill_qwen_1_5b() {
  ModelSpec s;
  s.architecture = "Qwen2ForCausalLM";
  s.hidden_size = 1536;
  s.intermediate_size = 8960;
  s.num_layers = 28;
  s.num_heads = 12;
  s.num_kv_heads = 2;
  s.vocab_size = 151936;
  s.max_position_embeddings = 131072;
  s.rope_theta = 10000.0;
  s.dtype = DType::kBF16;
  return s;
}

const GgufArchitecture kLlamaGguf{"llama", add_llama_config, add_llama_hparams, nullptr, true};
const GgufArchitecture kQwen2Gguf{"qwen2", add_qwen2_config, add_qwen2_hparams, nullptr, false};

}  // namespace

const ModelFamily& llama_family() {
  static constexpr FamilyArchitecture kArchitectures[] = {
      {"LlamaForCausalLM", &kLlamaGguf, {}, llama_generator_config},
      // Llama plus q/k/v biases; Qwen2Config's default context.
      {"Qwen2ForCausalLM",
       &kQwen2Gguf,
       {.default_max_position_embeddings = 32768, .qkv_bias_only = true},
       qwen2_generator_config},
  };
  static constexpr ModelPreset kPresets[] = {{"ds-coder-1.3b", ds_coder_1_3b},
                                             {"ds-llm-7b", ds_llm_7b},
                                             {"r1-distill-qwen-1.5b", r1_distill_qwen_1_5b}};
  static const ModelFamily kFamily{"dense",
                                   kArchitectures,
                                   create_llama_model,
                                   dense_tensor_names(),
                                   dense_tensor_layout,
                                   describe_dense,
                                   {check_dense_spec, kPresets}};
  return kFamily;
}

}  // namespace pagoda
