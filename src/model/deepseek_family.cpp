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
// writes the newer form.
//
// One architecture name covers V2 and V3. The V3 router (sigmoid scores, the bias-corrected
// noaux_tc top-k) is recognised by the exp_probs_b bias tensor or the sigmoid gating function.
#include <fmt/format.h>

#include "loader/gguf_writer.h"
#include "model/deepseek_config.h"
#include "model/model_config.h"
#include "model/model_family.h"
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

  bool v3 = false;
  const int64_t experts = file.find_int(key("expert_count")).value_or(0);
  if (experts > 0) {
    c["n_routed_experts"] = experts;
    c["num_experts_per_tok"] = file.get_int(key("expert_used_count"));
    c["moe_intermediate_size"] = file.get_int(key("expert_feed_forward_length"));
    c["n_shared_experts"] = file.find_int(key("expert_shared_count")).value_or(0);
    c["first_k_dense_replace"] = file.find_int(key("leading_dense_block_count")).value_or(0);
    c["routed_scaling_factor"] = file.find_float(key("expert_weights_scale")).value_or(1.0);
    c["norm_topk_prob"] = file.find_bool(key("expert_weights_norm")).value_or(false);
    const int64_t gating = file.find_int(key("expert_gating_func")).value_or(kGatingSoftmax);
    if (gating != 0 && gating != kGatingSoftmax && gating != kGatingSigmoid) {
      fail("{}: {} = {} is not supported (1 softmax, 2 sigmoid)", path, key("expert_gating_func"),
           gating);
    }
    const bool has_bias = has_tensor_ending(file, ".exp_probs_b.bias");
    v3 = gating == kGatingSigmoid || has_bias;
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

const GgufArchitecture kDeepseek2Gguf{"deepseek2", add_deepseek2_config, add_deepseek2_hparams,
                                      split_deepseek2, false};

}  // namespace

const ModelFamily& deepseek_family() {
  static constexpr FamilyArchitecture kArchitectures[] = {
      {"DeepseekV2ForCausalLM", &kDeepseek2Gguf},  // V2, V2-Lite, V2.5: MLA + MoE
      {"DeepseekV3ForCausalLM", &kDeepseek2Gguf},  // V3, R1: MLA + MoE (sigmoid, noaux_tc)
  };
  static const ModelFamily kFamily{"deepseek2", kArchitectures, create_deepseek_model,
                                   deepseek2_tensor_names(), deepseek_tensor_layout};
  return kFamily;
}

}  // namespace pagoda
