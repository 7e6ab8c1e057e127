// Parsing the DeepSeek-V2/V3 keys of config.json. Defaults are those of the published
// configuration_deepseek.py, so a file that leaves a key out means what it means to HF.
#include "model/deepseek_config.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "model/model_config.h"
#include "model/model_family.h"
#include "util/error.h"

namespace pagoda {
namespace {

using nlohmann::json;

// Reads one key of the raw config; absent and null both mean "the default".
class KeyReader {
 public:
  KeyReader(const json& object, const std::string& path) : object_(object), path_(path) {}

  const json* find(const std::string& key) const {
    const auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  int64_t integer(const std::string& key, int64_t fallback, int64_t min_value) const {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    if (!v->is_number_integer()) {
      fail("{}: key '{}' must be an integer, got {}", path_, key, v->dump());
    }
    const int64_t value = v->get<int64_t>();
    if (value < min_value)
      fail("{}: key '{}' must be at least {}, got {}", path_, key, min_value, value);
    return value;
  }
  int64_t required_integer(const std::string& key, int64_t min_value) const {
    if (find(key) == nullptr) fail("{}: key '{}' is missing", path_, key);
    return integer(key, 0, min_value);
  }
  double number(const std::string& key, double fallback) const {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    if (!v->is_number() || !std::isfinite(v->get<double>())) {
      fail("{}: key '{}' must be a finite number, got {}", path_, key, v->dump());
    }
    return v->get<double>();
  }
  bool boolean(const std::string& key, bool fallback) const {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) fail("{}: key '{}' must be true or false, got {}", path_, key, v->dump());
    return v->get<bool>();
  }
  std::string string(const std::string& key, const std::string& fallback) const {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    if (!v->is_string()) fail("{}: key '{}' must be a string, got {}", path_, key, v->dump());
    return v->get<std::string>();
  }

 private:
  const json& object_;
  const std::string& path_;
};

RopeParams rope_params(const ModelConfig& c, int64_t rotary_dim) {
  RopeParams p = rope_params_from_config(c, rotary_dim);
  const RopeScalingConfig& s = c.rope_scaling;
  if (p.type == RopeParams::Type::kYarn && p.attention_factor <= 0) {
    // DeepSeek's YaRN multiplies cos/sin by mscale(factor, mscale) / mscale(factor,
    // mscale_all_dim), where a missing mscale is 1 and a missing mscale_all_dim is 0
    // (modeling_deepseek.py, DeepseekV2YarnRotaryEmbedding). Spelled out so the rotary
    // table does not fall back to its generic rule when only one of the two is given.
    const double mscale = s.mscale > 0 ? s.mscale : 1.0;
    p.attention_factor =
        yarn_get_mscale(s.factor, mscale) / yarn_get_mscale(s.factor, s.mscale_all_dim);
  }
  return p;
}

}  // namespace

const char* moe_topk_method_name(MoeTopkMethod method) {
  switch (method) {
    case MoeTopkMethod::kGreedy:
      return "greedy";
    case MoeTopkMethod::kGroupLimitedGreedy:
      return "group_limited_greedy";
    case MoeTopkMethod::kNoauxTc:
      return "noaux_tc";
  }
  return "?";
}

DeepseekConfig DeepseekConfig::from_model_config(const ModelConfig& c) {
  const std::string& path = c.config_path;
  const KeyReader r(c.raw, path);
  DeepseekConfig d;
  d.hidden_size = c.hidden_size;
  d.num_layers = c.num_hidden_layers;
  d.num_heads = c.num_attention_heads;
  d.vocab_size = c.vocab_size;
  d.rms_norm_eps = static_cast<float>(c.rms_norm_eps);
  d.tie_word_embeddings = c.tie_word_embeddings;
  if (c.attention_bias) {
    fail(
        "{}: key 'attention_bias' is true, which no DeepSeek-V2/V3 checkpoint uses and Pagoda "
        "does not implement for MLA",
        path);
  }
  if (c.hidden_act != "silu") {
    fail("{}: key 'hidden_act' is '{}', DeepSeek models use 'silu'", path, c.hidden_act);
  }

  // MLA. q_lora_rank null means queries are not compressed (V2-Lite).
  d.q_lora_rank = c.raw.contains("q_lora_rank") ? r.integer("q_lora_rank", 0, 0) : 1536;
  d.kv_lora_rank = r.integer("kv_lora_rank", 512, 1);
  d.qk_nope_head_dim = r.integer("qk_nope_head_dim", 128, 1);
  d.qk_rope_head_dim = r.integer("qk_rope_head_dim", 64, 2);
  d.v_head_dim = r.integer("v_head_dim", 128, 1);
  if (d.qk_rope_head_dim % 2 != 0) {
    fail("{}: key 'qk_rope_head_dim' must be even, got {}", path, d.qk_rope_head_dim);
  }
  d.rope = rope_params(c, d.qk_rope_head_dim);
  d.softmax_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.q_head_dim())));
  // The softmax-scale correction applies whenever rope_scaling names mscale_all_dim (HF reads
  // it regardless of the scaling type; only YaRN configs carry it).
  if (c.rope_scaling.type != "default" && c.rope_scaling.mscale_all_dim != 0.0) {
    const double m = yarn_get_mscale(c.rope_scaling.factor, c.rope_scaling.mscale_all_dim);
    d.softmax_scale = static_cast<float>(d.softmax_scale * m * m);
  }

  // Feed-forward and experts.
  d.intermediate_size = c.intermediate_size;
  d.first_k_dense_replace = r.integer("first_k_dense_replace", 0, 0);
  d.moe_layer_freq = r.integer("moe_layer_freq", 1, 1);
  d.num_nextn_predict_layers = r.integer("num_nextn_predict_layers", 0, 0);
  const int64_t num_experts = r.integer("n_routed_experts", 0, 1);
  if (num_experts > 0) {
    MoeRouterConfig& m = d.router;
    m.num_experts = static_cast<int32_t>(num_experts);
    m.top_k = static_cast<int32_t>(r.required_integer("num_experts_per_tok", 1));
    d.moe_intermediate_size = r.required_integer("moe_intermediate_size", 1);
    d.num_shared_experts = r.integer("n_shared_experts", 0, 0);
    m.num_groups = static_cast<int32_t>(r.integer("n_group", 1, 1));
    m.topk_groups = static_cast<int32_t>(r.integer("topk_group", 1, 1));
    m.norm_topk_prob = r.boolean("norm_topk_prob", false);
    m.routed_scaling_factor = static_cast<float>(r.number("routed_scaling_factor", 1.0));
    const FamilyArchitecture* architecture = find_family_architecture(c.architecture);
    m.scale_after_norm = architecture == nullptr || architecture->config.moe_scale_after_norm;

    const std::string scoring = r.string("scoring_func", "softmax");
    if (scoring == "softmax") {
      m.scoring = MoeScoring::kSoftmax;
    } else if (scoring == "sigmoid") {
      m.scoring = MoeScoring::kSigmoid;
    } else {
      fail("{}: key 'scoring_func' has unsupported value '{}' (supported: softmax, sigmoid)", path,
           scoring);
    }
    // "gready" is how the published DeepSeek-V2 code (and its default config) spells greedy.
    const std::string method = r.string("topk_method", "greedy");
    if (method == "greedy" || method == "gready") {
      m.method = MoeTopkMethod::kGreedy;
    } else if (method == "group_limited_greedy") {
      m.method = MoeTopkMethod::kGroupLimitedGreedy;
    } else if (method == "noaux_tc") {
      m.method = MoeTopkMethod::kNoauxTc;
    } else {
      fail(
          "{}: key 'topk_method' has unsupported value '{}' (supported: greedy, "
          "group_limited_greedy, noaux_tc)",
          path, method);
    }
    // The router keeps per-token flags on the stack (moe.cpp); real models use <= 256 / 8.
    if (m.num_experts > 1024)
      fail("{}: key 'n_routed_experts' ({}) exceeds 1024", path, m.num_experts);
    if (m.num_groups > 256) fail("{}: key 'n_group' ({}) exceeds 256", path, m.num_groups);
    if (m.num_experts % m.num_groups != 0) {
      fail("{}: key 'n_group' ({}) must divide n_routed_experts ({})", path, m.num_groups,
           m.num_experts);
    }
    if (m.topk_groups > m.num_groups) {
      fail("{}: key 'topk_group' ({}) exceeds n_group ({})", path, m.topk_groups, m.num_groups);
    }
    const int64_t experts_per_group = m.num_experts / m.num_groups;
    const int64_t eligible =
        m.method == MoeTopkMethod::kGreedy ? m.num_experts : m.topk_groups * experts_per_group;
    if (m.top_k > eligible) {
      fail("{}: key 'num_experts_per_tok' ({}) exceeds the {} experts that {} can choose from",
           path, m.top_k, eligible, moe_topk_method_name(m.method));
    }
    if (m.method == MoeTopkMethod::kNoauxTc && experts_per_group < 2) {
      fail("{}: key 'n_group' ({}) leaves fewer than 2 experts per group, which noaux_tc needs",
           path, m.num_groups);
    }
  }
  return d;
}

}  // namespace pagoda
