// GGUF file -> ModelConfig + TensorStore + Tokenizer; see gguf_model.h. Metadata keys and
// tensor names are llama.cpp's (gguf-py/gguf/constants.py), mapped to what
// convert_hf_to_gguf.py read them from.
#include "model/gguf_model.h"

#include <cmath>
#include <numbers>
#include <optional>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "loader/gguf_repack.h"
#include "model/gguf_architecture.h"
#include "util/error.h"

namespace pagoda {
namespace {

using nlohmann::json;

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

const GgufArchitecture kLlama{"llama", add_llama_config, dense_tensor_names(), nullptr, true};
const GgufArchitecture kQwen2{"qwen2", add_qwen2_config, dense_tensor_names(), nullptr, false};

const GgufArchitecture* const kArchitectures[] = {&kLlama, &kQwen2, &gguf_deepseek2_architecture()};

const GgufArchitecture& architecture_named(const std::string& arch, const std::string& path) {
  for (const GgufArchitecture* a : kArchitectures) {
    if (arch == a->gguf_name) return *a;
  }
  fail(
      "{}: general.architecture '{}' is not supported for GGUF files (supported: llama, qwen2, "
      "deepseek2)",
      path, arch);
}

const GgufArchitecture& arch_of(const GgufFile& file) {
  return architecture_named(file.get_string("general.architecture"), file.path());
}

// "blk.<N>.<suffix>" -> {N, suffix}; nullopt for any other name.
std::optional<std::pair<std::string, std::string>> split_layer_name(const std::string& name) {
  constexpr std::string_view kPrefix = "blk.";
  if (name.rfind(kPrefix, 0) != 0) return std::nullopt;
  const size_t dot = name.find('.', kPrefix.size());
  if (dot == std::string::npos || dot == kPrefix.size()) return std::nullopt;
  std::string layer = name.substr(kPrefix.size(), dot - kPrefix.size());
  if (layer.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::make_pair(std::move(layer), name.substr(dot + 1));
}

std::string hf_name_in(const GgufArchitecture& arch, const std::string& gguf_name) {
  for (const TensorName& p : arch.names.global) {
    if (gguf_name == p.gguf) return p.hf;
  }
  const auto layer = split_layer_name(gguf_name);
  if (!layer) return "";
  for (const TensorName& p : arch.names.layer) {
    if (layer->second == p.gguf) return fmt::format("model.layers.{}.{}", layer->first, p.hf);
  }
  return "";
}

// A view of rows [first_row, first_row + shape[0]) of a repacked tensor, under a new name.
Tensor tensor_part(const Tensor& whole, int64_t total_rows, const GgufTensorPart& part) {
  Tensor t = whole;
  t.name = part.hf_name;
  t.shape = part.shape;
  const int64_t row_bytes = whole.size_bytes / total_rows;
  t.data = whole.data + part.first_row * row_bytes;
  t.size_bytes = part.shape[0] * row_bytes;
  if (whole.group_size > 0) {
    const int64_t groups = whole.shape.back() / whole.group_size;
    if (whole.scales) t.scales = whole.scales + part.first_row * groups;
    if (whole.mins) t.mins = whole.mins + part.first_row * groups;
  }
  return t;
}

}  // namespace

bool is_gguf_path(const std::string& path) {
  return path.size() > 5 && path.compare(path.size() - 5, 5, ".gguf") == 0;
}

std::string hf_tensor_name(const std::string& gguf_name, const std::string& architecture) {
  return hf_name_in(architecture_named(architecture, "hf_tensor_name"), gguf_name);
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
  const GgufArchitecture& arch = arch_of(file);
  const std::string a = arch.gguf_name;
  auto key = [&](const char* suffix) { return a + "." + suffix; };
  const int64_t hidden = file.get_int(key("embedding_length"));
  json c;
  c["hidden_size"] = hidden;
  c["intermediate_size"] = file.get_int(key("feed_forward_length"));
  c["num_hidden_layers"] = file.get_int(key("block_count"));
  c["num_attention_heads"] = file.get_int(key("attention.head_count"));
  c["rms_norm_eps"] = file.get_float(key("attention.layer_norm_rms_epsilon"));
  c["rope_theta"] = file.find_float(key("rope.freq_base")).value_or(10000.0);
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

  const std::string scaling = file.find_string(key("rope.scaling.type")).value_or("none");
  if (scaling == "linear" || scaling == "yarn") {
    json r = {{"type", scaling}, {"factor", file.get_float(key("rope.scaling.factor"))}};
    if (const auto orig = file.find_int(key("rope.scaling.original_context_length"))) {
      r["original_max_position_embeddings"] = *orig;
    }
    if (const auto fast = file.find_float(key("rope.scaling.yarn_beta_fast")))
      r["beta_fast"] = *fast;
    if (const auto slow = file.find_float(key("rope.scaling.yarn_beta_slow")))
      r["beta_slow"] = *slow;
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
  arch.add_config(file, c);
  return c;
}

GgufModel open_gguf_model(const std::string& path, FileMemory memory, Progress* progress) {
  auto file = std::make_shared<const GgufFile>(path, memory);
  const GgufArchitecture& arch = arch_of(*file);
  const json config_json = gguf_config_json(*file);
  ModelConfig config = ModelConfig::from_json(config_json, path);
  config.dir = path;

  TensorStore store = TensorStore::empty(path);
  if (progress != nullptr) {
    uint64_t total = 0;
    for (const GgufTensorInfo& info : file->tensors())
      total += static_cast<uint64_t>(info.size_bytes);
    progress->set_total(total);
  }
  for (const GgufTensorInfo& info : file->tensors()) {
    if (progress != nullptr) progress->advance(static_cast<uint64_t>(info.size_bytes));
    if (info.name == "rope_freqs.weight") continue;  // folded into rope_scaling above
    std::vector<GgufTensorPart> parts;
    const auto layer = split_layer_name(info.name);
    if (layer && arch.split) {
      parts = arch.split(info, layer->second, fmt::format("model.layers.{}.", layer->first));
    }
    std::string name = hf_name_in(arch, info.name);
    // Multi-token-prediction layers (DeepSeek-V3's nextn.*) follow the decoder layers; the model
    // does not run them, so their own tensors need no name.
    const bool beyond_decoder = layer && std::stoll(layer->first) >= config.num_hidden_layers;
    if (parts.empty() && name.empty() && beyond_decoder) continue;
    if (parts.empty() && name.empty()) {
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
    RepackedTensor r =
        repack_gguf_tensor(file, info, parts.empty() ? name : info.name, unpermute_heads);
    if (parts.empty()) {
      store.add(std::move(r.tensor), std::move(r.keep_alive));
      continue;
    }
    // Stacked tensors: one repack, several views sharing its bytes.
    for (const GgufTensorPart& part : parts) {
      store.add(tensor_part(r.tensor, info.rows(), part), r.keep_alive);
    }
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
