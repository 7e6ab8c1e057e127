// GGUF file -> ModelConfig + TensorStore + Tokenizer; see gguf_model.h. Metadata keys and
// tensor names are llama.cpp's (gguf-py/gguf/constants.py), mapped to what
// convert_hf_to_gguf.py read them from.
#include "model/gguf_model.h"

#include <cmath>
#include <numbers>
#include <string_view>

#include <fmt/format.h>

#include "loader/gguf_repack.h"
#include "util/error.h"

namespace pagoda {
namespace {

using nlohmann::json;

struct ArchInfo {
  const char* gguf_name;
  const char* hf_architecture;
  const char* model_type;
  bool permuted_qk;  // llama.cpp permutes q/k rows for interleaved rope (Llama only)
};

constexpr ArchInfo kArchitectures[] = {
    {"llama", "LlamaForCausalLM", "llama", true},
    {"qwen2", "Qwen2ForCausalLM", "qwen2", false},
};

const ArchInfo& arch_of(const GgufFile& file) {
  const std::string arch = file.get_string("general.architecture");
  for (const ArchInfo& a : kArchitectures) {
    if (arch == a.gguf_name) return a;
  }
  fail("{}: general.architecture '{}' is not supported for GGUF files (supported: llama, qwen2)",
       file.path(), arch);
}

// Per-layer tensors: GGUF suffix -> HF suffix.
struct NamePair {
  const char* gguf;
  const char* hf;
};
constexpr NamePair kLayerTensors[] = {
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
constexpr NamePair kGlobalTensors[] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};

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

}  // namespace

bool is_gguf_path(const std::string& path) {
  return path.size() > 5 && path.compare(path.size() - 5, 5, ".gguf") == 0;
}

std::string hf_tensor_name(const std::string& gguf_name) {
  for (const NamePair& p : kGlobalTensors) {
    if (gguf_name == p.gguf) return p.hf;
  }
  // "blk.<N>.<suffix>"
  constexpr std::string_view kPrefix = "blk.";
  if (gguf_name.rfind(kPrefix, 0) != 0) return "";
  const size_t dot = gguf_name.find('.', kPrefix.size());
  if (dot == std::string::npos || dot == kPrefix.size()) return "";
  const std::string layer = gguf_name.substr(kPrefix.size(), dot - kPrefix.size());
  if (layer.find_first_not_of("0123456789") != std::string::npos) return "";
  const std::string suffix = gguf_name.substr(dot + 1);
  for (const NamePair& p : kLayerTensors) {
    if (suffix == p.gguf) return fmt::format("model.layers.{}.{}", layer, p.hf);
  }
  return "";
}

GgufVocab read_gguf_vocab(const GgufFile& file) {
  GgufVocab v;
  v.origin = file.path();
  v.model = file.get_string("tokenizer.ggml.model");
  v.pre = file.find_string("tokenizer.ggml.pre").value_or("");
  v.tokens = file.string_array("tokenizer.ggml.tokens");
  v.token_types = file.int_array("tokenizer.ggml.token_type");
  v.scores = file.float_array("tokenizer.ggml.scores");
  v.merges = file.string_array("tokenizer.ggml.merges");
  v.bos_id = file.find_int("tokenizer.ggml.bos_token_id");
  v.eos_id = file.find_int("tokenizer.ggml.eos_token_id");
  v.unk_id = file.find_int("tokenizer.ggml.unknown_token_id");
  v.pad_id = file.find_int("tokenizer.ggml.padding_token_id");
  v.add_bos = file.find_bool("tokenizer.ggml.add_bos_token");
  v.add_eos = file.find_bool("tokenizer.ggml.add_eos_token");
  v.add_space_prefix = file.find_bool("tokenizer.ggml.add_space_prefix");
  v.chat_template = file.find_string("tokenizer.chat_template").value_or("");
  return v;
}

json gguf_config_json(const GgufFile& file) {
  const ArchInfo& arch = arch_of(file);
  const std::string a = arch.gguf_name;
  auto key = [&](const char* suffix) { return a + "." + suffix; };
  const int64_t hidden = file.get_int(key("embedding_length"));
  const int64_t heads = file.get_int(key("attention.head_count"));
  json c;
  c["architectures"] = {arch.hf_architecture};
  c["model_type"] = arch.model_type;
  c["hidden_size"] = hidden;
  c["intermediate_size"] = file.get_int(key("feed_forward_length"));
  c["num_hidden_layers"] = file.get_int(key("block_count"));
  c["num_attention_heads"] = heads;
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
  c["rms_norm_eps"] = file.get_float(key("attention.layer_norm_rms_epsilon"));
  const double theta = file.find_float(key("rope.freq_base")).value_or(10000.0);
  c["rope_theta"] = theta;
  if (const auto ctx = file.find_int(key("context_length"))) c["max_position_embeddings"] = *ctx;

  // Vocab size: the embedding's rows (HF pads it past the tokenizer's tokens).
  const GgufTensorInfo* embd = file.find_tensor("token_embd.weight");
  if (embd == nullptr) fail("{}: tensor token_embd.weight is missing", file.path());
  if (embd->dims.size() != 2 || embd->dims[0] != hidden) {
    fail("{}: tensor token_embd.weight has dims [{}], expected [{}, vocab]", file.path(),
         fmt::join(embd->dims, ", "), hidden);
  }
  c["vocab_size"] = embd->dims[1];
  c["tie_word_embeddings"] = file.find_tensor("output.weight") == nullptr;
  // Llama's attention_bias also means an o_proj bias; what the file has decides.
  if (std::string(arch.gguf_name) == "llama") {
    c["attention_bias"] = file.find_tensor("blk.0.attn_q.bias") != nullptr;
    c["mlp_bias"] = false;
  }

  const std::string scaling = file.find_string(key("rope.scaling.type")).value_or("none");
  if (const GgufTensorInfo* freqs = file.find_tensor("rope_freqs.weight")) {
    c["rope_scaling"] = llama3_rope_scaling(file, *freqs, theta, head_dim);
  } else if (scaling == "linear" || scaling == "yarn") {
    json r = {{"type", scaling}, {"factor", file.get_float(key("rope.scaling.factor"))}};
    if (const auto orig = file.find_int(key("rope.scaling.original_context_length"))) {
      r["original_max_position_embeddings"] = *orig;
    }
    c["rope_scaling"] = r;
  } else if (scaling != "none") {
    fail("{}: {} '{}' is not supported (supported: none, linear, yarn)", file.path(),
         key("rope.scaling.type"), scaling);
  }

  if (const auto bos = file.find_int("tokenizer.ggml.bos_token_id")) c["bos_token_id"] = *bos;
  if (const auto eos = file.find_int("tokenizer.ggml.eos_token_id")) c["eos_token_id"] = *eos;
  c["torch_dtype"] = embd->type == ggml_type::kBF16  ? "bfloat16"
                     : embd->type == ggml_type::kF32 ? "float32"
                                                     : "float16";
  return c;
}

GgufModel open_gguf_model(const std::string& path, FileMemory memory) {
  auto file = std::make_shared<const GgufFile>(path, memory);
  const ArchInfo& arch = arch_of(*file);
  const json config_json = gguf_config_json(*file);
  ModelConfig config = ModelConfig::from_json(config_json, path);
  config.dir = path;

  TensorStore store = TensorStore::empty(path);
  for (const GgufTensorInfo& info : file->tensors()) {
    if (info.name == "rope_freqs.weight") continue;  // folded into rope_scaling above
    const std::string name = hf_tensor_name(info.name);
    if (name.empty()) {
      fail(
          "{}: tensor {} is not used by Pagoda's {} model (a different architecture or "
          "variant?)",
          path, info.name, arch.gguf_name);
    }
    int64_t unpermute_heads = 0;
    if (arch.permuted_qk) {
      const bool is_q = name.find("self_attn.q_proj.") != std::string::npos;
      const bool is_k = name.find("self_attn.k_proj.") != std::string::npos;
      if (is_q) unpermute_heads = config.num_attention_heads;
      if (is_k) unpermute_heads = config.num_key_value_heads;
    }
    RepackedTensor r = repack_gguf_tensor(file, info, name, unpermute_heads);
    store.add(std::move(r.tensor), std::move(r.keep_alive));
  }

  GgufVocab vocab = read_gguf_vocab(*file);
  Tokenizer tokenizer = tokenizer_from_gguf(vocab);
  GenerationConfig generation;
  generation.bos_token_id = vocab.bos_id;
  if (vocab.eos_id) generation.eos_token_ids.push_back(*vocab.eos_id);
  // End-of-turn tokens stop generation too (llama.cpp treats eot/eom as end of generation).
  for (const char* k : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    const auto id = file->find_int(k);
    if (id && std::find(generation.eos_token_ids.begin(), generation.eos_token_ids.end(), *id) ==
                  generation.eos_token_ids.end()) {
      generation.eos_token_ids.push_back(*id);
    }
  }
  if (config.eos_token_ids.empty()) config.eos_token_ids = generation.eos_token_ids;
  return GgufModel{std::move(config), std::move(store), std::move(tokenizer),
                   std::move(vocab.chat_template), std::move(generation)};
}

}  // namespace pagoda
