// DeepseekConfig: the MLA / MoE / YaRN keys from real and hand-written configs, the HF
// defaults, and errors that name the file and the key.
#include <cmath>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/test_paths.h"
#include "model/deepseek_config.h"
#include "model/model_config.h"
#include "util/error.h"

namespace pagoda {
namespace {

using nlohmann::json;

json v2_lite_like() {
  // The V2-Lite shape (DeepSeek-V3 inference/configs/config_16B.json) in HF spelling.
  return json::parse(R"({
    "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
    "hidden_size": 2048, "intermediate_size": 10944, "num_hidden_layers": 27,
    "num_attention_heads": 16, "num_key_value_heads": 16, "vocab_size": 102400,
    "q_lora_rank": null, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "v_head_dim": 128, "n_routed_experts": 64, "num_experts_per_tok": 6, "n_shared_experts": 2,
    "moe_intermediate_size": 1408, "first_k_dense_replace": 1, "moe_layer_freq": 1,
    "topk_method": "gready", "n_group": 1, "topk_group": 1, "norm_topk_prob": false,
    "scoring_func": "softmax", "routed_scaling_factor": 1.0, "rms_norm_eps": 1e-6,
    "max_position_embeddings": 163840, "rope_theta": 10000,
    "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                     "beta_fast": 32, "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707}
  })");
}

DeepseekConfig parse(const json& j) {
  return DeepseekConfig::from_model_config(ModelConfig::from_json(j, "/m/config.json"));
}

std::string error_of(const json& j) {
  try {
    parse(j);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DeepseekConfig, ReadsTheR1Config) {
  const std::string path =
      pagoda::test::testdata_dir().string() + "/hf-configs/deepseek-ai-DeepSeek-R1/config.json";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "test data absent: " << path;
  const ModelConfig mc = ModelConfig::from_json(read_json_file(path), path);
  const DeepseekConfig c = DeepseekConfig::from_model_config(mc);
  EXPECT_EQ(c.q_lora_rank, 1536);
  EXPECT_EQ(c.kv_lora_rank, 512);
  EXPECT_EQ(c.latent_dim(), 576);
  EXPECT_EQ(c.q_head_dim(), 192);
  EXPECT_EQ(c.v_head_dim, 128);
  EXPECT_EQ(c.router.num_experts, 256);
  EXPECT_EQ(c.router.top_k, 8);
  EXPECT_EQ(c.router.num_groups, 8);
  EXPECT_EQ(c.router.topk_groups, 4);
  EXPECT_EQ(c.router.method, MoeTopkMethod::kNoauxTc);
  EXPECT_EQ(c.router.scoring, MoeScoring::kSigmoid);
  EXPECT_TRUE(c.router.norm_topk_prob);
  EXPECT_FLOAT_EQ(c.router.routed_scaling_factor, 2.5f);
  EXPECT_TRUE(c.router.scale_after_norm);
  EXPECT_EQ(c.num_shared_experts, 1);
  EXPECT_EQ(c.moe_intermediate_size, 2048);
  EXPECT_EQ(c.num_nextn_predict_layers, 1);
  EXPECT_FALSE(c.is_moe_layer(2));
  EXPECT_TRUE(c.is_moe_layer(3));
  EXPECT_TRUE(c.is_moe_layer(60));
  // (128 + 64)^-0.5 * (0.1 * 1.0 * ln 40 + 1)^2
  const double m = 0.1 * std::log(40.0) + 1.0;
  EXPECT_NEAR(c.softmax_scale, std::pow(192.0, -0.5) * m * m, 1e-7);
  EXPECT_EQ(c.rope.type, RopeParams::Type::kYarn);
  EXPECT_EQ(c.rope.rotary_dim, 64);
  EXPECT_NEAR(c.rope.attention_factor, 1.0, 1e-12);  // mscale == mscale_all_dim
}

TEST(DeepseekConfig, V2LiteShape) {
  const DeepseekConfig c = parse(v2_lite_like());
  EXPECT_EQ(c.q_lora_rank, 0);  // null: q_proj, no compression
  EXPECT_EQ(c.latent_dim(), 576);
  EXPECT_EQ(c.router.method, MoeTopkMethod::kGreedy);  // "gready", as V2's code spells it
  EXPECT_EQ(c.router.scoring, MoeScoring::kSoftmax);
  EXPECT_FALSE(c.router.scale_after_norm);  // V2's rule
  EXPECT_EQ(c.num_shared_experts, 2);
  EXPECT_FALSE(c.is_moe_layer(0));
  EXPECT_TRUE(c.is_moe_layer(1));
  const double m = 0.1 * 0.707 * std::log(40.0) + 1.0;
  EXPECT_NEAR(c.softmax_scale, std::pow(192.0, -0.5) * m * m, 1e-7);
}

TEST(DeepseekConfig, DefaultsFollowConfigurationDeepseek) {
  json j = v2_lite_like();
  for (const char* key :
       {"q_lora_rank", "first_k_dense_replace", "moe_layer_freq", "topk_method", "n_group",
        "topk_group", "norm_topk_prob", "scoring_func", "routed_scaling_factor", "rope_scaling"}) {
    j.erase(key);
  }
  const DeepseekConfig c = parse(j);
  EXPECT_EQ(c.q_lora_rank, 1536);  // absent (not null): HF's default
  EXPECT_EQ(c.first_k_dense_replace, 0);
  EXPECT_EQ(c.router.method, MoeTopkMethod::kGreedy);
  EXPECT_FLOAT_EQ(c.router.routed_scaling_factor, 1.0f);
  EXPECT_NEAR(c.softmax_scale, std::pow(192.0, -0.5), 1e-8);  // no YaRN, no correction
  EXPECT_TRUE(c.is_moe_layer(0));

  j.erase("n_routed_experts");
  EXPECT_FALSE(parse(j).is_moe_layer(5));  // no experts: every layer dense
}

TEST(DeepseekConfig, MoeLayerFrequency) {
  json j = v2_lite_like();
  j["first_k_dense_replace"] = 2;
  j["moe_layer_freq"] = 3;
  const DeepseekConfig c = parse(j);
  EXPECT_FALSE(c.is_moe_layer(0));
  EXPECT_FALSE(c.is_moe_layer(2));
  EXPECT_TRUE(c.is_moe_layer(3));
  EXPECT_FALSE(c.is_moe_layer(4));
  EXPECT_TRUE(c.is_moe_layer(6));
}

TEST(DeepseekConfig, ErrorsNameFileAndKey) {
  json j = v2_lite_like();
  j["topk_method"] = "best_guess";
  std::string e = error_of(j);
  EXPECT_NE(e.find("/m/config.json"), std::string::npos) << e;
  EXPECT_NE(e.find("'topk_method'"), std::string::npos) << e;
  EXPECT_NE(e.find("best_guess"), std::string::npos) << e;

  j = v2_lite_like();
  j["scoring_func"] = "relu";
  EXPECT_NE(error_of(j).find("'scoring_func'"), std::string::npos);

  j = v2_lite_like();
  j["n_group"] = 5;  // 64 experts do not split into 5 groups
  EXPECT_NE(error_of(j).find("'n_group'"), std::string::npos);

  j = v2_lite_like();
  j["topk_method"] = "group_limited_greedy";
  j["n_group"] = 8;
  j["topk_group"] = 9;
  EXPECT_NE(error_of(j).find("'topk_group'"), std::string::npos);

  j = v2_lite_like();
  j["topk_method"] = "group_limited_greedy";
  j["n_group"] = 16;
  j["topk_group"] = 1;  // 4 experts to choose 6 from
  EXPECT_NE(error_of(j).find("'num_experts_per_tok'"), std::string::npos);

  j = v2_lite_like();
  j["kv_lora_rank"] = "512";
  EXPECT_NE(error_of(j).find("'kv_lora_rank'"), std::string::npos);

  j = v2_lite_like();
  j.erase("num_experts_per_tok");
  EXPECT_NE(error_of(j).find("'num_experts_per_tok' is missing"), std::string::npos);
}

}  // namespace
}  // namespace pagoda
