// llama.cpp's `deepseek2` GGUF architecture as Pagoda's DeepSeek-V2/V3 model
// (deepseek_v2_model.cpp). Keys and tensor names are those llama.cpp's converter writes
// (conversion/deepseek.py and the shared MoE keys of conversion/base.py) and its loader reads
// (src/models/deepseek2.cpp).
//
// Two generations of files exist. Older ones store kv_b_proj whole (attn_kv_b) and give the MHA
// head sizes in attention.key_length / value_length. Since llama.cpp's MLA rework the converter
// writes the attention as MQA over the latent (head_count_kv 1, key_length kv_lora + rope,
// value_length kv_lora), moves the MHA sizes to key_length_mla / value_length_mla, and splits
// kv_b_proj per head into attn_k_b [H, kv_lora, nope] (W_uk already transposed, exactly what
// absorbed MLA multiplies by) and attn_v_b [H, v, kv_lora]. Pagoda keeps those two as
// self_attn.k_b_proj / v_b_proj, flattened to [H * kv_lora, nope] and [H * v, kv_lora].
//
// One architecture name covers V2 and V3. The V3 router (sigmoid scores, the bias-corrected
// noaux_tc top-k) is recognised by the exp_probs_b bias tensor or the sigmoid gating function.
#include <fmt/format.h>

#include "model/gguf_architecture.h"
#include "util/error.h"

namespace pagoda {
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

}  // namespace

const GgufArchitecture& gguf_deepseek2_architecture() {
  static const GgufArchitecture kArch{"deepseek2", add_deepseek2_config, deepseek2_tensor_names(),
                                      split_deepseek2, false};
  return kArch;
}

}  // namespace pagoda
