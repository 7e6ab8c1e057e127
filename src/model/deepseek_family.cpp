// The DeepSeek-V2/V3 family, described once (model/model_family.h): DeepseekV2ForCausalLM (V2,
// V2-Lite, V2.5) and DeepseekV3ForCausalLM (V3, R1), both llama.cpp's `deepseek2` GGUF
// architecture. The graph is deepseek_v2_model.cpp. Keys and tensor names are those llama.cpp's
// converter writes (conversion/deepseek.py and the shared MoE keys of conversion/base.py) and its
// loader reads (src/models/deepseek2.cpp).
//
// Two generations of files exist. Older ones store kv_b_proj whole (attn_kv_b) and give the MHA
// head sizes in attention.key_length / value_length. Since llama.cpp's MLA rework the converter
// writes the attention as MQA over the latent (head_count_kv 1, key_length kv_lora + rope,
// value_length kv_lora), moves the MHA sizes to key_length_mla / value_length_mla, and splits
// kv_b_proj per head into attn_k_b [H, kv_lora, nope] (W_uk already transposed, exactly what
// absorbed MLA multiplies by) and attn_v_b [H, v, kv_lora]. Pagoda keeps those two as
// self_attn.k_b_proj / v_b_proj, flattened to [H * kv_lora, nope] and [H * v, kv_lora]. Export
// writes the newer form, stacking the routed experts and splitting kv_b_proj as the converter does
// (plan_deepseek2_export).
//
// One architecture name covers V2 and V3. V3 is recognised by the sigmoid gating function, which
// llama.cpp's converter writes for every V3 config (dense ones too), or by the exp_probs_b bias
// tensor of its bias-corrected noaux_tc router.
#include <iterator>
#include <map>
#include <optional>
#include <regex>

#include <fmt/format.h>

#include "loader/gguf_writer.h"
#include "loader/safetensors.h"
#include "loader/tensor_rows.h"
#include "model/deepseek_config.h"
#include "model/model_config.h"
#include "model/model_family.h"
#include "model/model_spec.h"
#include "util/error.h"

namespace pagoda {

const FamilyTensorNames& deepseek2_tensor_names() {
  static constexpr TensorName kLayer[] = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_q_a.weight", "self_attn.q_a_proj.weight"},
      {"attn_q_a_norm.weight", "self_attn.q_a_layernorm.weight"},
      {"attn_q_b.weight", "self_attn.q_b_proj.weight"},
      {"attn_kv_a_mqa.weight", "self_attn.kv_a_proj_with_mqa.weight"},
      {"attn_kv_a_norm.weight", "self_attn.kv_a_layernorm.weight"},
      {"attn_kv_b.weight", "self_attn.kv_b_proj.weight"},
      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"},
      {"ffn_gate_inp.weight", "mlp.gate.weight"},
      {"exp_probs_b.bias", "mlp.gate.e_score_correction_bias"},
      {"ffn_gate_shexp.weight", "mlp.shared_experts.gate_proj.weight"},
      {"ffn_up_shexp.weight", "mlp.shared_experts.up_proj.weight"},
      {"ffn_down_shexp.weight", "mlp.shared_experts.down_proj.weight"},
  };
  static const FamilyTensorNames kNames{kLayer, causal_lm_global_tensor_names()};
  return kNames;
}

namespace {

using nlohmann::json;

// ggml's expert_gating_func values (llama-hparams.h): 0 none (old files: softmax), 1 softmax,
// 2 sigmoid.
constexpr int64_t kGatingSoftmax = 1, kGatingSigmoid = 2;

bool has_tensor_ending(const GgufFile& file, const std::string& suffix) {
  for (const GgufTensorInfo& t : file.tensors()) {
    if (t.name.size() > suffix.size() &&
        t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return true;
  }
  return false;
}

// ---- GGUF import ---------------------------------------------------------------------------

void add_deepseek2_config(const GgufFile& file, json& c) {
  auto key = [](const char* suffix) { return std::string("deepseek2.") + suffix; };
  const std::string& path = file.path();
  const int64_t heads = c["num_attention_heads"].get<int64_t>();
  // Every head attends over the one shared latent; HF's config still counts them as KV heads.
  c["num_key_value_heads"] = heads;

  const int64_t rope = file.get_int(key("rope.dimension_count"));
  int64_t qk_head = 0, v_head = 0;
  if (const auto mla = file.find_int(key("attention.key_length_mla"))) {
    qk_head = *mla;
    v_head = file.get_int(key("attention.value_length_mla"));
  } else {  // older files: the MHA sizes themselves
    qk_head = file.get_int(key("attention.key_length"));
    v_head = file.get_int(key("attention.value_length"));
  }
  if (rope <= 0 || rope % 2 != 0 || qk_head <= rope) {
    fail("{}: {} = {} must be even and smaller than the query head size {}", path,
         key("rope.dimension_count"), rope, qk_head);
  }
  c["q_lora_rank"] = json(nullptr);
  if (const auto q_lora = file.find_int(key("attention.q_lora_rank")); q_lora && *q_lora > 0)
    c["q_lora_rank"] = *q_lora;
  c["kv_lora_rank"] = file.get_int(key("attention.kv_lora_rank"));
  c["qk_nope_head_dim"] = qk_head - rope;
  c["qk_rope_head_dim"] = rope;
  c["v_head_dim"] = v_head;

  // block_count includes V3's multi-token-prediction layers; the model skips them.
  const int64_t nextn = file.find_int(key("nextn_predict_layers")).value_or(0);
  const int64_t blocks = file.get_int(key("block_count"));
  c["num_hidden_layers"] = blocks - nextn;
  c["num_nextn_predict_layers"] = nextn;

  // V2 or V3: GGUF names both deepseek2. llama.cpp's converter writes expert_gating_func from
  // config.json's scoring_func whenever the config has one, dense models included, and V3's
  // configs all say sigmoid (V2's softmax); a V3 router's correction bias is exp_probs_b.
  const std::optional<int64_t> gating_key = file.find_int(key("expert_gating_func"));
  const int64_t gating = gating_key.value_or(kGatingSoftmax);
  if (gating != 0 && gating != kGatingSoftmax && gating != kGatingSigmoid) {
    fail("{}: {} = {} is not supported (1 softmax, 2 sigmoid)", path, key("expert_gating_func"),
         gating);
  }
  const bool has_bias = has_tensor_ending(file, ".exp_probs_b.bias");
  const bool v3 = gating == kGatingSigmoid || has_bias;
  if (gating_key) c["scoring_func"] = gating == kGatingSigmoid ? "sigmoid" : "softmax";
  const int64_t experts = file.find_int(key("expert_count")).value_or(0);
  if (experts > 0) {
    c["n_routed_experts"] = experts;
    c["num_experts_per_tok"] = file.get_int(key("expert_used_count"));
    c["moe_intermediate_size"] = file.get_int(key("expert_feed_forward_length"));
    c["n_shared_experts"] = file.find_int(key("expert_shared_count")).value_or(0);
    c["first_k_dense_replace"] = file.find_int(key("leading_dense_block_count")).value_or(0);
    c["routed_scaling_factor"] = file.find_float(key("expert_weights_scale")).value_or(1.0);
    c["norm_topk_prob"] = file.find_bool(key("expert_weights_norm")).value_or(false);
    c["scoring_func"] = gating == kGatingSigmoid ? "sigmoid" : "softmax";
    const int64_t groups = file.find_int(key("expert_group_count")).value_or(1);
    c["n_group"] = std::max<int64_t>(groups, 1);
    c["topk_group"] =
        std::max<int64_t>(file.find_int(key("expert_group_used_count")).value_or(1), 1);
    c["topk_method"] = has_bias ? "noaux_tc" : groups > 1 ? "group_limited_greedy" : "greedy";
  } else {
    c["first_k_dense_replace"] = blocks;  // a dense model in this architecture (no experts)
  }
  c["architectures"] = {v3 ? "DeepseekV3ForCausalLM" : "DeepseekV2ForCausalLM"};
  c["model_type"] = v3 ? "deepseek_v3" : "deepseek_v2";

  // YaRN: the converter stores 0.1 * mscale_all_dim as the log multiplier. Released configs give
  // mscale equal to mscale_all_dim (the cos/sin correction then cancels); GGUF keeps only one.
  if (c.contains("rope_scaling") && c["rope_scaling"].value("type", "") == "yarn") {
    if (const auto log_mul = file.find_float(key("rope.scaling.yarn_log_multiplier"))) {
      c["rope_scaling"]["mscale_all_dim"] = *log_mul / 0.1;
      c["rope_scaling"]["mscale"] = *log_mul / 0.1;
    }
  }
}

// Stacked experts [E, rows, cols] become E HF matrices; the fused gate_up [E, 2 * inter, hidden]
// becomes gate and up per expert (gate first, as llama.cpp splits it); the split MLA matrices keep
// their per-head stacking, flattened to two dims.
std::vector<GgufTensorPart> split_deepseek2(const GgufTensorInfo& info, const std::string& suffix,
                                            const std::string& hf_prefix) {
  std::vector<GgufTensorPart> parts;
  const std::vector<int64_t> shape = info.shape();
  if (suffix == "attn_k_b.weight" || suffix == "attn_v_b.weight") {
    if (shape.size() != 3) return parts;  // unknown form: gguf_model.cpp reports the name
    const char* name = suffix == "attn_k_b.weight" ? "k_b_proj" : "v_b_proj";
    parts.push_back({fmt::format("{}self_attn.{}.weight", hf_prefix, name),
                     0,
                     {shape[0] * shape[1], shape[2]}});
    return parts;
  }
  struct Stacked {
    const char* suffix;
    const char* first;
    const char* second;  // fused gate_up only
  };
  static constexpr Stacked kStacked[] = {{"ffn_gate_exps.weight", "gate_proj", nullptr},
                                         {"ffn_up_exps.weight", "up_proj", nullptr},
                                         {"ffn_down_exps.weight", "down_proj", nullptr},
                                         {"ffn_gate_up_exps.weight", "gate_proj", "up_proj"}};
  for (const Stacked& s : kStacked) {
    if (suffix != s.suffix || shape.size() != 3) continue;
    const int64_t rows = s.second ? shape[1] / 2 : shape[1];
    for (int64_t e = 0; e < shape[0]; ++e) {
      parts.push_back({fmt::format("{}mlp.experts.{}.{}.weight", hf_prefix, e, s.first),
                       e * shape[1],
                       {rows, shape[2]}});
      if (s.second) {
        parts.push_back({fmt::format("{}mlp.experts.{}.{}.weight", hf_prefix, e, s.second),
                         e * shape[1] + rows,
                         {rows, shape[2]}});
      }
    }
  }
  return parts;
}

// ---- GGUF export ---------------------------------------------------------------------------

// The MLA form of llama.cpp's converter: attention as MQA over the latent (one KV head of
// kv_lora + rope), the MHA head sizes as *_mla, and the MoE keys of its shared MoE code.
void add_deepseek2_hparams(GgufWriter& w, const ModelConfig& c) {
  const std::string a = "deepseek2";
  auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
  const DeepseekConfig d = DeepseekConfig::from_model_config(c);
  add_common_gguf_hparams(w, c, a);
  w.set_u32(a + ".attention.head_count_kv", 1);
  w.set_u32(a + ".rope.dimension_count", u32(d.qk_rope_head_dim));
  // 0 = queries not compressed. llama.cpp's converter leaves the key out then, and llama.cpp
  // only accepts that for V2-Lite's layer counts, so it is always written.
  w.set_u32(a + ".attention.q_lora_rank", u32(d.q_lora_rank));
  w.set_u32(a + ".attention.kv_lora_rank", u32(d.kv_lora_rank));
  w.set_u32(a + ".attention.key_length", u32(d.latent_dim()));
  w.set_u32(a + ".attention.value_length", u32(d.kv_lora_rank));
  w.set_u32(a + ".attention.key_length_mla", u32(d.q_head_dim()));
  w.set_u32(a + ".attention.value_length_mla", u32(d.v_head_dim));
  const MoeRouterConfig& r = d.router;
  const bool moe = r.num_experts > 0;
  w.set_u32(a + ".leading_dense_block_count", u32(moe ? d.first_k_dense_replace : d.num_layers));
  w.set_u32(a + ".expert_feed_forward_length",
            u32(moe ? d.moe_intermediate_size : d.intermediate_size));
  w.set_u32(a + ".expert_shared_count", u32(d.num_shared_experts));
  if (moe) {
    if (d.moe_layer_freq != 1)
      fail(
          "{}: moe_layer_freq {} has no GGUF form (llama.cpp runs every layer after the dense "
          "ones as MoE)",
          c.config_path, d.moe_layer_freq);
    w.set_u32(a + ".expert_count", u32(r.num_experts));
    w.set_u32(a + ".expert_used_count", u32(r.top_k));
    w.set_f32(a + ".expert_weights_scale", r.routed_scaling_factor);
    if (r.norm_topk_prob) w.set_bool(a + ".expert_weights_norm", true);
    w.set_u32(a + ".expert_gating_func", r.scoring == MoeScoring::kSigmoid ? 2 : 1);
    w.set_u32(a + ".expert_group_count", u32(r.num_groups));
    w.set_u32(a + ".expert_group_used_count", u32(r.topk_groups));
  } else if (const auto scoring = c.raw.find("scoring_func");
             scoring != c.raw.end() && scoring->is_string()) {
    // As llama.cpp's converter: written whenever config.json names one, so that import tells a
    // dense V3 (sigmoid) from a V2 (softmax).
    w.set_u32(a + ".expert_gating_func", *scoring == "sigmoid" ? 2 : 1);
  }
  if (c.rope_scaling.type == "yarn") {
    // GGUF keeps one YaRN magnitude for both of DeepSeek's (cos/sin and softmax scale), which
    // holds when they are equal, as in every released config; refuse anything else.
    const double mscale = c.rope_scaling.mscale > 0 ? c.rope_scaling.mscale : 1.0;
    if (mscale != c.rope_scaling.mscale_all_dim)
      fail("{}: rope_scaling mscale {} differs from mscale_all_dim {}, which GGUF cannot express",
           c.config_path, mscale, c.rope_scaling.mscale_all_dim);
    // The converter's convention: 0.1 * mscale_all_dim (llama.cpp divides the 0.1 out again).
    w.set_f32(a + ".rope.scaling.yarn_log_multiplier",
              static_cast<float>(0.1 * c.rope_scaling.mscale_all_dim));
  }
}

// Routed experts, one [E, rows, cols] tensor per projection and layer, as llama.cpp's converter
// stacks them; multi-token-prediction layers are left out (llama.cpp does not load them).
void plan_stacked_experts(const TensorStore& store, const DeepseekConfig& d, GgufExportPlan& plan) {
  static const std::regex kExpert(
      R"(model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(\w+)_proj\.weight)");
  std::map<std::pair<int64_t, std::string>, std::vector<const Tensor*>> stacks;
  for (const auto& [hf_name, tensor] : store.tensors()) {
    std::smatch m;
    if (!std::regex_match(hf_name, m, kExpert)) continue;
    const int64_t layer = std::stoll(m[1].str()), expert = std::stoll(m[2].str());
    if (layer >= d.num_layers) continue;  // multi-token-prediction layers are not exported
    auto& stack = stacks[{layer, m[3].str()}];
    stack.resize(static_cast<size_t>(d.router.num_experts), nullptr);
    if (expert >= d.router.num_experts) fail("{}: tensor {}: no such expert", tensor.path, hf_name);
    require_float_tensor(tensor, "export-gguf");
    stack[static_cast<size_t>(expert)] = &tensor;
  }
  for (auto& [key, stack] : stacks) {
    const auto& [layer, proj] = key;
    for (size_t e = 0; e < stack.size(); ++e) {
      if (stack[e] == nullptr)
        fail("{}: expert {} of layer {} has no {}_proj", store.path(), e, layer, proj);
    }
    const int64_t rows = stack[0]->shape[0], cols = stack[0]->shape[1];
    for (const Tensor* t : stack) {
      if (t->shape != stack[0]->shape)
        fail("{}: tensor {} has shape {}, unlike expert 0's {}", t->path, t->name,
             format_shape(t->shape), format_shape(stack[0]->shape));
    }
    plan.tensors.push_back({fmt::format("blk.{}.ffn_{}_exps.weight", layer, proj),
                            {static_cast<int64_t>(stack.size()), rows, cols},
                            [stack, rows, cols](int64_t r, float* dst) {
                              read_row_f32(*stack[static_cast<size_t>(r / rows)], r % rows, cols,
                                           dst);
                            }});
  }
}

// kv_b_proj [H * (nope + v), kv_lora] split per head as llama.cpp's converter does for absorbed
// MLA: attn_k_b [H, kv_lora, nope] (W_uk transposed) and attn_v_b [H, v, kv_lora].
void plan_split_kv_b(const Tensor& kv_b, int64_t layer, const DeepseekConfig& d,
                     GgufExportPlan& plan) {
  require_float_tensor(kv_b, "export-gguf");
  const int64_t H = d.num_heads, rank = d.kv_lora_rank, nope = d.qk_nope_head_dim, v = d.v_head_dim;
  if (kv_b.shape != std::vector<int64_t>{H * (nope + v), rank})
    fail("{}: tensor {} has shape {}, expected [{}, {}]", kv_b.path, kv_b.name,
         format_shape(kv_b.shape), H * (nope + v), rank);
  plan.tensors.push_back({fmt::format("blk.{}.attn_k_b.weight", layer),
                          {H, rank, nope},
                          [&kv_b, rank, nope, v](int64_t r, float* dst) {
                            const int64_t h = r / rank, col = r % rank;
                            for (int64_t i = 0; i < nope; ++i)
                              read_row_f32(kv_b, (h * (nope + v) + i) * rank + col, 1, dst + i);
                          }});
  plan.tensors.push_back({fmt::format("blk.{}.attn_v_b.weight", layer),
                          {H, v, rank},
                          [&kv_b, rank, nope, v](int64_t r, float* dst) {
                            read_row_f32(kv_b, (r / v) * (nope + v) + nope + r % v, rank, dst);
                          }});
}

GgufExportPlan plan_deepseek2_export(const TensorStore& store, const ModelConfig& config) {
  static const std::regex kLayerTensor(R"(model\.layers\.(\d+)\.(.+))");
  const DeepseekConfig d = DeepseekConfig::from_model_config(config);
  GgufExportPlan plan;
  plan_stacked_experts(store, d, plan);
  for (const auto& [hf_name, tensor] : store.tensors()) {
    std::smatch m;
    if (!std::regex_match(hf_name, m, kLayerTensor)) continue;
    const int64_t layer = std::stoll(m[1].str());
    const std::string suffix = m[2].str();
    if (layer >= d.num_layers || suffix.starts_with("mlp.experts.")) {
      plan.handled.insert(hf_name);  // stacked above, or an MTP layer's
    } else if (suffix == "self_attn.kv_b_proj.weight") {
      plan_split_kv_b(tensor, layer, d, plan);
      plan.handled.insert(hf_name);
    }
  }
  return plan;
}

// ---- tensors -------------------------------------------------------------------------------

// One decoder layer as the published safetensors name it; an MTP layer (layer >= num_layers)
// adds what it needs to predict the token after next from this layer's output and the next
// token's embedding: enorm/hnorm/eh_proj in front, its own embed_tokens and shared_head (a copy
// of the final norm and lm_head) behind. MTP layers are MoE when there are experts (V3).
void append_deepseek_layer(std::vector<TensorLayout>& t, const DeepseekConfig& d,
                           const std::string& dtype, int64_t layer) {
  const int64_t hidden = d.hidden_size, heads = d.num_heads;
  const bool mtp = layer >= d.num_layers;
  const std::string p = fmt::format("model.layers.{}.", layer);
  if (mtp) {
    t.push_back({p + "embed_tokens.weight", dtype, {d.vocab_size, hidden}});
    t.push_back({p + "enorm.weight", dtype, {hidden}});
    t.push_back({p + "hnorm.weight", dtype, {hidden}});
    t.push_back({p + "eh_proj.weight", dtype, {hidden, 2 * hidden}});
  }
  t.push_back({p + "input_layernorm.weight", dtype, {hidden}});
  const std::string a = p + "self_attn.";
  if (d.q_lora_rank > 0) {
    t.push_back({a + "q_a_proj.weight", dtype, {d.q_lora_rank, hidden}});
    t.push_back({a + "q_a_layernorm.weight", dtype, {d.q_lora_rank}});
    t.push_back({a + "q_b_proj.weight", dtype, {heads * d.q_head_dim(), d.q_lora_rank}});
  } else {
    t.push_back({a + "q_proj.weight", dtype, {heads * d.q_head_dim(), hidden}});
  }
  t.push_back({a + "kv_a_proj_with_mqa.weight", dtype, {d.latent_dim(), hidden}});
  t.push_back({a + "kv_a_layernorm.weight", dtype, {d.kv_lora_rank}});
  t.push_back({a + "kv_b_proj.weight",
               dtype,
               {heads * (d.qk_nope_head_dim + d.v_head_dim), d.kv_lora_rank}});
  t.push_back({a + "o_proj.weight", dtype, {hidden, heads * d.v_head_dim}});
  t.push_back({p + "post_attention_layernorm.weight", dtype, {hidden}});
  auto mlp = [&](const std::string& m, int64_t inter) {
    t.push_back({m + "gate_proj.weight", dtype, {inter, hidden}});
    t.push_back({m + "up_proj.weight", dtype, {inter, hidden}});
    t.push_back({m + "down_proj.weight", dtype, {hidden, inter}});
  };
  const int64_t num_experts = d.router.num_experts;
  if (!(d.is_moe_layer(layer) || (mtp && num_experts > 0))) {
    mlp(p + "mlp.", d.intermediate_size);
  } else {
    t.push_back({p + "mlp.gate.weight", dtype, {num_experts, hidden}});
    // DeepSeek-V3 keeps the routing bias in fp32 whatever the weights' type.
    if (d.router.method == MoeTopkMethod::kNoauxTc)
      t.push_back({p + "mlp.gate.e_score_correction_bias", "F32", {num_experts}});
    for (int64_t e = 0; e < num_experts; ++e) {
      mlp(fmt::format("{}mlp.experts.{}.", p, e), d.moe_intermediate_size);
    }
    if (d.num_shared_experts > 0) {
      mlp(p + "mlp.shared_experts.", d.moe_intermediate_size * d.num_shared_experts);
    }
  }
  if (mtp) {
    t.push_back({p + "shared_head.norm.weight", dtype, {hidden}});
    t.push_back({p + "shared_head.head.weight", dtype, {d.vocab_size, hidden}});
  }
}

std::vector<TensorLayout> deepseek_tensor_layout(const ModelConfig& c, const std::string& dtype) {
  const DeepseekConfig d = DeepseekConfig::from_model_config(c);
  std::vector<TensorLayout> t;
  t.push_back({"model.embed_tokens.weight", dtype, {d.vocab_size, d.hidden_size}});
  for (int64_t layer = 0; layer < d.num_layers + d.num_nextn_predict_layers; ++layer) {
    append_deepseek_layer(t, d, dtype, layer);
  }
  t.push_back({"model.norm.weight", dtype, {d.hidden_size}});
  if (!d.tie_word_embeddings) t.push_back({"lm_head.weight", dtype, {d.vocab_size, d.hidden_size}});
  return t;
}

// ---- the model generator -------------------------------------------------------------------

// An integer key that a zero leaves null (HF's "not used": q_lora_rank, n_routed_experts).
json zero_as_null(int64_t value) {
  return value == 0 ? json(nullptr) : json(value);
}

// config.json of DeepseekV2ForCausalLM / DeepseekV3ForCausalLM, key for key as the published
// configs write them (the generator's; their transformers config classes read them).
// V3's config always has num_nextn_predict_layers; V2's only when there are MTP layers.
json deepseek_generator_config(const ModelSpec& s, int64_t vocab_size, bool v3) {
  const DeepseekSpec& d = s.deepseek;
  const bool moe = d.n_routed_experts > 0;
  json c = {
      {"architectures", {s.architecture}},
      {"model_type", v3 ? "deepseek_v3" : "deepseek_v2"},
      {"hidden_size", s.hidden_size},
      {"intermediate_size", s.intermediate_size},
      {"num_hidden_layers", s.num_layers},
      {"num_attention_heads", s.num_heads},
      {"num_key_value_heads", s.num_heads},  // MLA: every head has its own K/V from the latent
      {"q_lora_rank", zero_as_null(d.q_lora_rank)},
      {"kv_lora_rank", d.kv_lora_rank},
      {"qk_nope_head_dim", d.qk_nope_head_dim},
      {"qk_rope_head_dim", d.qk_rope_head_dim},
      {"v_head_dim", d.v_head_dim},
      {"n_routed_experts", zero_as_null(d.n_routed_experts)},
      {"n_shared_experts", moe ? json(d.n_shared_experts) : json(nullptr)},
      {"num_experts_per_tok", moe ? json(d.num_experts_per_tok) : json(nullptr)},
      {"moe_intermediate_size", d.moe_intermediate_size},
      {"first_k_dense_replace", d.first_k_dense_replace},
      {"moe_layer_freq", d.moe_layer_freq},
      {"n_group", d.n_group},
      {"topk_group", d.topk_group},
      {"topk_method", d.topk_method},
      {"scoring_func", d.scoring_func},
      {"norm_topk_prob", d.norm_topk_prob},
      {"routed_scaling_factor", d.routed_scaling_factor},
      {"aux_loss_alpha", 0.001},
      {"seq_aux", true},
      {"ep_size", 1},
      {"hidden_act", "silu"},
      {"max_position_embeddings", s.max_position_embeddings},
      {"rms_norm_eps", s.rms_norm_eps},
      {"rope_theta", s.rope_theta},
      {"rope_scaling", s.rope_scaling},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"tie_word_embeddings", s.tie_word_embeddings},
      {"torch_dtype", torch_dtype_name(s.dtype)},
      {"vocab_size", vocab_size},
      {"initializer_range", 0.02},
      {"use_cache", true},
      {"pagoda_generator", {{"preset", s.preset}, {"seed", s.seed}}},
  };
  if (v3 || d.num_nextn_predict_layers > 0)
    c["num_nextn_predict_layers"] = d.num_nextn_predict_layers;
  return c;
}

json deepseek_v2_generator_config(const ModelSpec& s, int64_t vocab_size) {
  return deepseek_generator_config(s, vocab_size, false);
}

json deepseek_v3_generator_config(const ModelSpec& s, int64_t vocab_size) {
  json c = deepseek_generator_config(s, vocab_size, true);
  // Every published V3 config names V3's router, which a dense model never runs.
  if (s.deepseek.n_routed_experts == 0) {
    c["scoring_func"] = "sigmoid";
    c["topk_method"] = "noaux_tc";
  }
  return c;
}

// MLA gives every query head its own K/V from the latent. The rest is checked by parsing the
// config.json that will be written, so the generator and the loader agree on the rules (an
// error names the key).
void check_deepseek_spec(ModelSpec& s, const std::string& config_path) {
  s.num_kv_heads = s.num_heads;
  const json config = find_family_architecture(s.architecture)->generator_config(s, s.vocab_size);
  DeepseekConfig::from_model_config(ModelConfig::from_json(config, config_path));
}

// The rope_scaling of the published DeepSeek-V2/V3 configs: YaRN x40 over 4096 positions;
// `mscale` (= mscale_all_dim) is 0.707 for V2, 1.0 for V3.
json deepseek_yarn(double mscale) {
  return {{"type", "yarn"},          {"factor", 40},   {"original_max_position_embeddings", 4096},
          {"beta_fast", 32},         {"beta_slow", 1}, {"mscale", mscale},
          {"mscale_all_dim", mscale}};
}

ModelSpec deepseek_v2_spec(bool lite) {
  // deepseek-ai/DeepSeek-V2 and DeepSeek-V2-Lite config.json: YaRN x40 over 4096 positions,
  // softmax routing; V2 compresses queries and routes within groups, V2-Lite does neither.
  ModelSpec s;
  s.architecture = "DeepseekV2ForCausalLM";
  s.hidden_size = lite ? 2048 : 5120;
  s.intermediate_size = lite ? 10944 : 12288;
  s.num_layers = lite ? 27 : 60;
  s.num_heads = lite ? 16 : 128;
  s.num_kv_heads = s.num_heads;
  s.vocab_size = 102400;
  s.max_position_embeddings = 163840;
  s.rope_scaling = deepseek_yarn(0.707);
  s.dtype = DType::kBF16;
  DeepseekSpec& d = s.deepseek;
  d.q_lora_rank = lite ? 0 : 1536;
  d.n_routed_experts = lite ? 64 : 160;
  d.n_shared_experts = 2;
  d.num_experts_per_tok = 6;
  d.moe_intermediate_size = lite ? 1408 : 1536;
  d.first_k_dense_replace = 1;
  d.n_group = lite ? 1 : 8;
  d.topk_group = lite ? 1 : 3;
  d.topk_method = lite ? "greedy" : "group_limited_greedy";
  d.routed_scaling_factor = lite ? 1.0 : 16.0;
  return s;
}

ModelSpec deepseek_v2() {
  return deepseek_v2_spec(false);
}

ModelSpec deepseek_v2_lite() {
  return deepseek_v2_spec(true);
}

// deepseek-ai/DeepSeek-V3 config.json (R1 has the same shape), in bf16 rather than the
// published fp8: sigmoid scores, noaux_tc routing, one MTP layer.
ModelSpec deepseek_v3() {
  ModelSpec s;
  s.architecture = "DeepseekV3ForCausalLM";
  s.hidden_size = 7168;
  s.intermediate_size = 18432;
  s.num_layers = 61;
  s.num_heads = 128;
  s.num_kv_heads = 128;
  s.vocab_size = 129280;
  s.max_position_embeddings = 163840;
  s.rope_scaling = deepseek_yarn(1.0);
  s.dtype = DType::kBF16;
  DeepseekSpec& d = s.deepseek;
  d.q_lora_rank = 1536;
  d.n_routed_experts = 256;
  d.n_shared_experts = 1;
  d.num_experts_per_tok = 8;
  d.moe_intermediate_size = 2048;
  d.first_k_dense_replace = 3;
  d.n_group = 8;
  d.topk_group = 4;
  d.topk_method = "noaux_tc";
  d.scoring_func = "sigmoid";
  d.norm_topk_prob = true;
  d.routed_scaling_factor = 2.5;
  d.num_nextn_predict_layers = 1;
  return s;
}

// DeepSeek-V3's structure at test size: q_lora, noaux_tc routing over sigmoid scores in groups,
// a shared expert, a dense first layer, YaRN, and one MTP layer (speculative method "mtp").
ModelSpec tiny_deepseek_v3() {
  ModelSpec s;
  s.architecture = "DeepseekV3ForCausalLM";
  s.hidden_size = 64;
  s.intermediate_size = 96;
  s.num_layers = 2;
  s.num_heads = 4;
  s.num_kv_heads = 4;
  s.vocab_size = 512;
  s.max_position_embeddings = 1024;
  s.rope_scaling = deepseek_yarn(1.0);
  s.dtype = DType::kF32;
  DeepseekSpec& d = s.deepseek;
  d.q_lora_rank = 24;
  d.kv_lora_rank = 32;
  d.qk_nope_head_dim = 16;
  d.qk_rope_head_dim = 8;
  d.v_head_dim = 12;
  d.n_routed_experts = 8;
  d.n_shared_experts = 1;
  d.num_experts_per_tok = 2;
  d.moe_intermediate_size = 24;
  d.first_k_dense_replace = 1;
  d.n_group = 2;
  d.topk_group = 1;
  d.topk_method = "noaux_tc";
  d.scoring_func = "sigmoid";
  d.norm_topk_prob = true;
  d.routed_scaling_factor = 2.5;
  d.num_nextn_predict_layers = 1;
  return s;
}

// ---- pagoda info ---------------------------------------------------------------------------

// MLA's ranks and what one token caches; the experts, which layers use them and how they are
// routed; the MTP layers the checkpoint carries.
std::string describe_deepseek(const ModelConfig& c) {
  const DeepseekConfig d = DeepseekConfig::from_model_config(c);
  std::string out;
  auto line = std::back_inserter(out);
  fmt::format_to(line, "attention:          MLA (multi-head latent), {} heads\n", d.num_heads);
  fmt::format_to(line, "  q_lora_rank:      {}\n",
                 d.q_lora_rank > 0 ? std::to_string(d.q_lora_rank) : "none (q_proj)");
  fmt::format_to(line, "  kv_lora_rank:     {}\n", d.kv_lora_rank);
  fmt::format_to(line, "  qk head dims:     {} nope + {} rope\n", d.qk_nope_head_dim,
                 d.qk_rope_head_dim);
  fmt::format_to(line, "  v_head_dim:       {}\n", d.v_head_dim);
  fmt::format_to(line, "  cached per token: {} values per layer (latent {} + rope {})\n",
                 d.latent_dim(), d.kv_lora_rank, d.qk_rope_head_dim);
  const MoeRouterConfig& r = d.router;
  if (r.num_experts == 0) {
    fmt::format_to(line, "experts:            none (every layer dense, intermediate size {})\n",
                   d.intermediate_size);
  } else {
    int64_t num_moe_layers = 0;
    for (int64_t layer = 0; layer < d.num_layers; ++layer) num_moe_layers += d.is_moe_layer(layer);
    fmt::format_to(line, "experts (MoE):      {} routed + {} shared, {} per token\n", r.num_experts,
                   d.num_shared_experts, r.top_k);
    fmt::format_to(line, "  MoE layers:       {} of {} (first {} dense, then every {})\n",
                   num_moe_layers, d.num_layers, d.first_k_dense_replace, d.moe_layer_freq);
    fmt::format_to(line, "  intermediate:     {} per expert, {} dense\n", d.moe_intermediate_size,
                   d.intermediate_size);
    fmt::format_to(line, "  routing:          {} scores, {}",
                   r.scoring == MoeScoring::kSigmoid ? "sigmoid" : "softmax",
                   moe_topk_method_name(r.method));
    if (r.method != MoeTopkMethod::kGreedy)
      fmt::format_to(line, " ({} groups, {} per token)", r.num_groups, r.topk_groups);
    fmt::format_to(line, ", norm_topk_prob {}, routed_scaling_factor {}\n", r.norm_topk_prob,
                   r.routed_scaling_factor);
  }
  if (d.num_nextn_predict_layers > 0) {
    fmt::format_to(line,
                   "MTP layers:         {} (multi-token prediction; drafts with speculative method mtp)\n",
                   d.num_nextn_predict_layers);
  }
  return out;
}

const GgufArchitecture kDeepseek2Gguf{
    "deepseek2", add_deepseek2_config, add_deepseek2_hparams, split_deepseek2,
    false,       plan_deepseek2_export};

}  // namespace

const ModelFamily& deepseek_family() {
  static constexpr FamilyArchitecture kArchitectures[] = {
      // V2, V2-Lite, V2.5: MLA + MoE; the gate scales only unnormalised weights.
      {"DeepseekV2ForCausalLM",
       &kDeepseek2Gguf,
       {.moe_scale_after_norm = false},
       deepseek_v2_generator_config},
      // V3, R1: MLA + MoE (sigmoid, noaux_tc)
      {"DeepseekV3ForCausalLM", &kDeepseek2Gguf, {}, deepseek_v3_generator_config},
  };
  static constexpr ModelPreset kPresets[] = {{"deepseek-v2", deepseek_v2},
                                             {"deepseek-v2-lite", deepseek_v2_lite},
                                             {"deepseek-v3", deepseek_v3},
                                             {"tiny-deepseek-v3", tiny_deepseek_v3}};
  static const ModelFamily kFamily{"deepseek2",
                                   kArchitectures,
                                   create_deepseek_model,
                                   deepseek2_tensor_names(),
                                   deepseek_tensor_layout,
                                   describe_deepseek,
                                   {check_deepseek_spec, kPresets}};
  return kFamily;
}

}  // namespace pagoda
