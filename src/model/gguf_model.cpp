// GGUF file -> ModelConfig + TensorStore + Tokenizer; see gguf_model.h. The metadata every
// architecture shares is read here (and written, for export); what is an architecture's own comes
// from its family (model/model_family.h). Metadata keys and tensor names are llama.cpp's
// (gguf-py/gguf/constants.py), mapped to what convert_hf_to_gguf.py read them from.
#include "model/gguf_model.h"

#include <optional>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "loader/gguf_repack.h"
#include "loader/gguf_writer.h"
#include "model/model_family.h"
#include "util/error.h"

namespace pagoda {
namespace {

using nlohmann::json;

GgufFamily family_of(const GgufFile& file) {
  return gguf_family_named(file.get_string("general.architecture"), file.path());
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

std::string hf_name_in(const FamilyTensorNames& names, const std::string& gguf_name) {
  for (const TensorName& p : names.global) {
    if (gguf_name == p.gguf) return p.hf;
  }
  const auto layer = split_layer_name(gguf_name);
  if (!layer) return "";
  for (const TensorName& p : names.layer) {
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

// The export side of gguf_config_json's rope_scaling.
void add_rope_scaling(GgufWriter& w, const ModelConfig& c, const std::string& arch) {
  const RopeScalingConfig& r = c.rope_scaling;
  if (r.type == "linear") {
    w.set_string(arch + ".rope.scaling.type", "linear");
    w.set_f32(arch + ".rope.scaling.factor", static_cast<float>(r.factor));
  } else if (r.type == "yarn") {
    w.set_string(arch + ".rope.scaling.type", "yarn");
    w.set_f32(arch + ".rope.scaling.factor", static_cast<float>(r.factor));
    if (r.original_max_position_embeddings > 0)
      w.set_u32(arch + ".rope.scaling.original_context_length",
                static_cast<uint32_t>(r.original_max_position_embeddings));
    w.set_f32(arch + ".rope.scaling.yarn_beta_fast", static_cast<float>(r.beta_fast));
    w.set_f32(arch + ".rope.scaling.yarn_beta_slow", static_cast<float>(r.beta_slow));
  } else if (r.type != "default") {
    // llama3 needs a rope_freqs tensor and dynamic has no GGUF form; refuse rather than write
    // a file that runs with the wrong positions.
    fail("{}: rope_scaling type '{}' is not exported to GGUF yet (default, linear, yarn)",
         c.config_path, r.type);
  }
}

}  // namespace

bool is_gguf_path(const std::string& path) {
  return path.size() > 5 && path.compare(path.size() - 5, 5, ".gguf") == 0;
}

std::string hf_tensor_name(const std::string& gguf_name, const std::string& architecture) {
  return hf_name_in(gguf_family_named(architecture, "hf_tensor_name").family->tensor_names,
                    gguf_name);
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
  const GgufArchitecture& arch = *family_of(file).gguf;
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

// The inverse of the shared part of gguf_config_json.
void add_common_gguf_hparams(GgufWriter& w, const ModelConfig& c, const std::string& arch) {
  auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
  w.set_u32(arch + ".vocab_size", u32(c.vocab_size));
  w.set_u32(arch + ".context_length", u32(c.max_position_embeddings));
  w.set_u32(arch + ".embedding_length", u32(c.hidden_size));
  w.set_u32(arch + ".block_count", u32(c.num_hidden_layers));
  w.set_u32(arch + ".feed_forward_length", u32(c.intermediate_size));
  w.set_u32(arch + ".attention.head_count", u32(c.num_attention_heads));
  w.set_f32(arch + ".attention.layer_norm_rms_epsilon", static_cast<float>(c.rms_norm_eps));
  w.set_f32(arch + ".rope.freq_base", static_cast<float>(c.rope_theta));
  add_rope_scaling(w, c, arch);
}

GgufModel open_gguf_model(const std::string& path, FileMemory memory, Progress* progress) {
  auto file = std::make_shared<const GgufFile>(path, memory);
  const GgufFamily family = family_of(*file);
  const GgufArchitecture& arch = *family.gguf;
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
    std::string name = hf_name_in(family.family->tensor_names, info.name);
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
