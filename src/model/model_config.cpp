// Parsing and validating config.json; defaults follow transformers' LlamaConfig/Qwen2Config.
#include "model/model_config.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include "model/model_family.h"
#include "util/error.h"

namespace pagoda {
namespace {

using nlohmann::json;

// A value as it appears in the file, short enough for a one-line message.
std::string show(const json& value) {
  std::string text = value.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return fmt::format("{} {}", value.type_name(), text);
}

// A key's value, or nullptr when it is absent or null (transformers treats both as "use the
// default").
const json* find_value(const json& object, const std::string& key) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

int64_t as_int(const json& value, const std::string& key, const std::string& path) {
  if (!value.is_number_integer()) {
    fail("{}: key '{}' must be an integer, got {}", path, key, show(value));
  }
  return value.get<int64_t>();
}

double as_number(const json& value, const std::string& key, const std::string& path) {
  if (!value.is_number()) fail("{}: key '{}' must be a number, got {}", path, key, show(value));
  const double v = value.get<double>();
  if (!std::isfinite(v)) fail("{}: key '{}' must be finite", path, key);
  return v;
}

struct Reader {
  const json& object;
  std::string path;
  std::string prefix;  // "rope_scaling." for nested keys

  std::string name(const std::string& key) const { return prefix + key; }

  int64_t required_positive_int(const std::string& key) const {
    const json* v = find_value(object, key);
    if (v == nullptr) fail("{}: key '{}' is missing", path, name(key));
    return positive(as_int(*v, name(key), path), key);
  }
  int64_t optional_positive_int(const std::string& key, int64_t fallback) const {
    const json* v = find_value(object, key);
    return v == nullptr ? fallback : positive(as_int(*v, name(key), path), key);
  }
  double optional_number(const std::string& key, double fallback) const {
    const json* v = find_value(object, key);
    return v == nullptr ? fallback : as_number(*v, name(key), path);
  }
  double required_number(const std::string& key) const {
    const json* v = find_value(object, key);
    if (v == nullptr) fail("{}: key '{}' is missing", path, name(key));
    return as_number(*v, name(key), path);
  }
  double optional_positive_number(const std::string& key, double fallback) const {
    const double v = optional_number(key, fallback);
    if (!(v > 0)) fail("{}: key '{}' must be positive, got {}", path, name(key), v);
    return v;
  }
  bool optional_bool(const std::string& key, bool fallback) const {
    const json* v = find_value(object, key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean())
      fail("{}: key '{}' must be true or false, got {}", path, name(key), show(*v));
    return v->get<bool>();
  }
  std::string optional_string(const std::string& key, const std::string& fallback) const {
    const json* v = find_value(object, key);
    if (v == nullptr) return fallback;
    if (!v->is_string()) fail("{}: key '{}' must be a string, got {}", path, name(key), show(*v));
    return v->get<std::string>();
  }

  int64_t positive(int64_t v, const std::string& key) const {
    if (v <= 0) fail("{}: key '{}' must be positive, got {}", path, name(key), v);
    return v;
  }
};

RopeScalingConfig parse_rope_scaling(const json& value, const std::string& path) {
  RopeScalingConfig rope;
  if (!value.is_object()) {
    fail("{}: key 'rope_scaling' must be null or an object, got {}", path, show(value));
  }
  const Reader r{value, path, "rope_scaling."};
  // transformers renamed `type` to `rope_type`; files in the wild carry either (or both).
  const std::string type_key = find_value(value, "rope_type") != nullptr ? "rope_type" : "type";
  rope.type = r.optional_string(type_key, "");
  if (rope.type.empty()) fail("{}: key 'rope_scaling.rope_type' is missing", path);
  if (rope.type != "default" && rope.type != "linear" && rope.type != "dynamic" &&
      rope.type != "yarn" && rope.type != "llama3") {
    fail(
        "{}: key 'rope_scaling.{}' has unsupported value '{}' (supported: default, linear, "
        "dynamic, yarn, llama3)",
        path, type_key, rope.type);
  }
  if (rope.type == "default") return rope;

  rope.factor = r.required_number("factor");
  if (!(rope.factor >= 1.0)) {
    fail("{}: key 'rope_scaling.factor' must be at least 1, got {}", path, rope.factor);
  }
  rope.original_max_position_embeddings =
      r.optional_positive_int("original_max_position_embeddings", 0);
  if (rope.type == "yarn") {
    rope.beta_fast = r.optional_number("beta_fast", 32.0);
    rope.beta_slow = r.optional_number("beta_slow", 1.0);
    rope.mscale = r.optional_number("mscale", 0.0);
    rope.mscale_all_dim = r.optional_number("mscale_all_dim", 0.0);
    rope.attention_factor = r.optional_number("attention_factor", 0.0);
  } else if (rope.type == "llama3") {
    // transformers requires all four for llama3 (rope_config_validation).
    rope.low_freq_factor = r.required_number("low_freq_factor");
    rope.high_freq_factor = r.required_number("high_freq_factor");
    if (rope.original_max_position_embeddings == 0) {
      fail("{}: key 'rope_scaling.original_max_position_embeddings' is missing", path);
    }
    if (!(rope.high_freq_factor > rope.low_freq_factor)) {
      fail("{}: key 'rope_scaling.high_freq_factor' ({}) must exceed low_freq_factor ({})", path,
           rope.high_freq_factor, rope.low_freq_factor);
    }
  }
  return rope;
}

DType parse_torch_dtype(const std::string& text, const std::string& key, const std::string& path) {
  if (text == "float32" || text == "float") return DType::kF32;
  if (text == "float16" || text == "half") return DType::kF16;
  if (text == "bfloat16") return DType::kBF16;
  fail("{}: key '{}' has unsupported value '{}' (expected float32, float16 or bfloat16)", path, key,
       text);
}

}  // namespace

json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    fail("{}: cannot open: {}", path,
         std::filesystem::exists(path) ? "permission denied or not a file" : "no such file");
  }
  try {
    return json::parse(in);
  } catch (const json::parse_error& e) {
    std::string what = e.what();
    for (char& c : what) {
      if (c == '\n' || c == '\r' || c == '\t') c = ' ';
    }
    fail("{}: not valid JSON: {}", path, what);
  }
}

std::vector<int64_t> parse_token_id_list(const json& object, const std::string& key,
                                         const std::string& path) {
  std::vector<int64_t> ids;
  const json* v = find_value(object, key);
  if (v == nullptr) return ids;
  if (v->is_array()) {
    for (const json& id : *v) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0) {
        fail("{}: key '{}' must be an id, a list of ids or null, got {}", path, key, show(*v));
      }
      ids.push_back(id.get<int64_t>());
    }
    return ids;
  }
  if (!v->is_number_integer() || v->get<int64_t>() < 0) {
    fail("{}: key '{}' must be an id, a list of ids or null, got {}", path, key, show(*v));
  }
  ids.push_back(v->get<int64_t>());
  return ids;
}

ModelConfig ModelConfig::from_dir(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  ModelConfig config = from_json(read_json_file(path), path);
  config.dir = dir;
  return config;
}

ModelConfig ModelConfig::from_json(const json& j, const std::string& path) {
  ModelConfig c;
  c.config_path = path;
  c.dir = std::filesystem::path(path).parent_path().string();
  if (!j.is_object()) fail("{}: expected a JSON object, got {}", path, show(j));
  c.raw = j;
  const Reader r{j, path, ""};

  const json* arch = find_value(j, "architectures");
  if (arch == nullptr) fail("{}: key 'architectures' is missing", path);
  if (!arch->is_array() || arch->empty() || !(*arch)[0].is_string()) {
    fail("{}: key 'architectures' must be a non-empty list of strings, got {}", path, show(*arch));
  }
  c.architecture = (*arch)[0].get<std::string>();
  c.model_type = r.optional_string("model_type", "");

  c.hidden_size = r.required_positive_int("hidden_size");
  c.intermediate_size = r.required_positive_int("intermediate_size");
  c.num_hidden_layers = r.required_positive_int("num_hidden_layers");
  c.num_attention_heads = r.required_positive_int("num_attention_heads");
  c.vocab_size = r.required_positive_int("vocab_size");
  c.num_key_value_heads = r.optional_positive_int("num_key_value_heads", c.num_attention_heads);
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    fail("{}: key 'num_key_value_heads' ({}) does not divide key 'num_attention_heads' ({})", path,
         c.num_key_value_heads, c.num_attention_heads);
  }
  // An explicit head_dim may differ from hidden/heads (transformers allows it); without one
  // the heads must split hidden_size evenly.
  if (find_value(j, "head_dim") != nullptr) {
    c.head_dim = r.optional_positive_int("head_dim", 0);
  } else {
    if (c.hidden_size % c.num_attention_heads != 0) {
      fail("{}: key 'num_attention_heads' ({}) does not divide key 'hidden_size' ({})", path,
           c.num_attention_heads, c.hidden_size);
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }

  // The architecture's own defaults come from its family (model/model_family.h); an
  // architecture no family serves parses as Llama and is refused by the registry.
  const FamilyArchitecture* family_arch = find_family_architecture(c.architecture);
  const ArchitectureConfigRules rules =
      family_arch ? family_arch->config : ArchitectureConfigRules{};
  c.rms_norm_eps = r.optional_positive_number("rms_norm_eps", 1e-6);
  c.rope_theta = r.optional_positive_number("rope_theta", 10000.0);
  c.max_position_embeddings =
      r.optional_positive_int("max_position_embeddings", rules.default_max_position_embeddings);
  if (const json* rope = find_value(j, "rope_scaling")) {
    c.rope_scaling = parse_rope_scaling(*rope, path);
  }
  c.tie_word_embeddings = r.optional_bool("tie_word_embeddings", false);
  if (rules.qkv_bias_only) {
    // Qwen2Attention hard-codes bias=True on q/k/v and bias=False on o_proj.
    c.attention_bias = true;
    c.o_proj_bias = false;
  } else {
    c.attention_bias = r.optional_bool("attention_bias", false);
    c.o_proj_bias = c.attention_bias;
    c.mlp_bias = r.optional_bool("mlp_bias", false);
  }
  c.hidden_act = r.optional_string("hidden_act", "silu");

  // Newer transformers write `dtype`; older ones `torch_dtype`.
  const std::string dtype_key = find_value(j, "torch_dtype") != nullptr ? "torch_dtype" : "dtype";
  const std::string dtype = r.optional_string(dtype_key, "float32");
  c.torch_dtype = parse_torch_dtype(dtype, dtype_key, path);

  const std::vector<int64_t> bos = parse_token_id_list(j, "bos_token_id", path);
  if (!bos.empty()) c.bos_token_id = bos.front();
  c.eos_token_ids = parse_token_id_list(j, "eos_token_id", path);
  return c;
}

}  // namespace pagoda
