// The model generator and the built-in tokenizer: generated directories load through
// TensorStore and ModelConfig with exactly the expected tensors, weights have the intended
// scale, output is deterministic, sharding changes only the layout, and tokenizer.json has
// the structure Hugging Face's tokenizers library expects.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/test_paths.h"
#include "common/tiny_specs.h"
#include "demo/builtin_tokenizer.h"
#include "demo/model_generator.h"
#include "loader/safetensors.h"
#include "model/deepseek_config.h"
#include "model/model_config.h"
#include "test_helpers.h"
#include "util/half.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::error_of;
using test::expect_message;
using test::TempDir;

json read_json(const fs::path& path) {
  std::ifstream in(path);
  return json::parse(in);
}

std::vector<float> values_of(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.num_elements()));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (t.dtype) {
      case DType::kF32:
        out[i] = t.data_as<float>()[i];
        break;
      case DType::kBF16:
        out[i] = bf16_to_f32(t.data_as<bf16_t>()[i]);
        break;
      case DType::kF16:
        out[i] = f16_to_f32(t.data_as<f16_t>()[i]);
        break;
      case DType::kI8:
      case DType::kI4:
        ADD_FAILURE() << "the generator writes float weights only";
        return out;
    }
  }
  return out;
}

// The names and shapes written out by hand, independent of model_tensor_layout.
std::map<std::string, std::vector<int64_t>> expected_tensors(int64_t vocab, int64_t hidden,
                                                             int64_t inter, int64_t layers,
                                                             int64_t q, int64_t kv, bool bias,
                                                             bool tied) {
  std::map<std::string, std::vector<int64_t>> t;
  t["model.embed_tokens.weight"] = {vocab, hidden};
  t["model.norm.weight"] = {hidden};
  if (!tied) t["lm_head.weight"] = {vocab, hidden};
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t[p + "input_layernorm.weight"] = {hidden};
    t[p + "post_attention_layernorm.weight"] = {hidden};
    t[p + "self_attn.q_proj.weight"] = {q, hidden};
    t[p + "self_attn.k_proj.weight"] = {kv, hidden};
    t[p + "self_attn.v_proj.weight"] = {kv, hidden};
    t[p + "self_attn.o_proj.weight"] = {hidden, q};
    if (bias) {
      t[p + "self_attn.q_proj.bias"] = {q};
      t[p + "self_attn.k_proj.bias"] = {kv};
      t[p + "self_attn.v_proj.bias"] = {kv};
    }
    t[p + "mlp.gate_proj.weight"] = {inter, hidden};
    t[p + "mlp.up_proj.weight"] = {inter, hidden};
    t[p + "mlp.down_proj.weight"] = {hidden, inter};
  }
  return t;
}

void expect_store_matches(const TensorStore& store,
                          const std::map<std::string, std::vector<int64_t>>& want, DType dtype) {
  std::vector<std::string> want_names;
  for (const auto& [name, shape] : want) want_names.push_back(name);
  EXPECT_EQ(store.names(), want_names);
  for (const auto& [name, shape] : want) {
    const Tensor& t = store.get(name, std::span<const int64_t>(shape));
    EXPECT_EQ(t.dtype, dtype) << name;
  }
}

TEST(ModelGenerator, TinyLlamaLoadsWithExactTensors) {
  TempDir dir;
  const ModelSpec spec = model_preset("tiny");
  const GeneratedModel model = generate_model(spec, dir.str());

  const ModelConfig c = ModelConfig::from_dir(dir.str());
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_hidden_layers, 2);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.intermediate_size, 172);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.torch_dtype, DType::kF32);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 0);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{1});

  const TensorStore store = TensorStore::open(dir.str());
  expect_store_matches(store, expected_tensors(512, 64, 172, 2, 64, 32, false, false), DType::kF32);
  EXPECT_EQ(model.weight_files, std::vector<std::string>{dir.file("model.safetensors")});
  EXPECT_EQ(store.total_bytes(), model.weight_bytes);
  EXPECT_EQ(model.num_parameters * 4, model.weight_bytes);
  EXPECT_FALSE(fs::exists(dir.file("model.safetensors.index.json")));
  EXPECT_TRUE(fs::exists(dir.file("generation_config.json")));
}

TEST(ModelGenerator, WeightsHaveTheIntendedScale) {
  TempDir dir;
  ModelSpec spec = model_preset("tiny");
  spec.dtype = DType::kBF16;
  generate_model(spec, dir.str());
  const TensorStore store = TensorStore::open(dir.str());

  // Linear weights: uniform with std 1/sqrt(fan_in).
  for (const char* name : {"model.layers.0.mlp.down_proj.weight", "model.embed_tokens.weight",
                           "model.layers.1.self_attn.q_proj.weight"}) {
    const Tensor& t = store.get(name);
    const std::vector<float> v = values_of(t);
    const double fan_in = static_cast<double>(t.shape.back());
    const double bound = std::sqrt(3.0 / fan_in) * 1.01;  // bf16 rounding
    double sum = 0, sum_sq = 0;
    for (float x : v) {
      ASSERT_TRUE(std::isfinite(x));
      ASSERT_LE(std::abs(x), bound) << name;
      sum += x;
      sum_sq += static_cast<double>(x) * x;
    }
    const double n = static_cast<double>(v.size());
    const double mean = sum / n;
    const double std = std::sqrt(sum_sq / n - mean * mean);
    EXPECT_NEAR(std * std::sqrt(fan_in), 1.0, 0.05) << name;
    EXPECT_NEAR(mean * std::sqrt(fan_in), 0.0, 0.1) << name;
  }
  // Norm weights: 1 plus a little noise, not all equal.
  const std::vector<float> norm = values_of(store.get("model.layers.0.input_layernorm.weight"));
  std::set<float> distinct(norm.begin(), norm.end());
  EXPECT_GT(distinct.size(), 10u);
  for (float x : norm) {
    EXPECT_GE(x, 0.94f);
    EXPECT_LE(x, 1.06f);
  }
}

TEST(ModelGenerator, Qwen2ShardedWithBiasesAndIndex) {
  TempDir dir;
  ModelSpec spec = model_preset("r1-distill-qwen-1.5b");
  spec.hidden_size = 96;
  spec.num_heads = 6;
  spec.num_kv_heads = 2;
  spec.intermediate_size = 160;
  spec.num_layers = 3;
  spec.vocab_size = 600;
  spec.num_shards = 3;
  const GeneratedModel model = generate_model(spec, dir.str());
  ASSERT_EQ(model.weight_files.size(), 3u);
  EXPECT_EQ(model.weight_files[1], dir.file("model-00002-of-00003.safetensors"));

  const json index = read_json(dir.file("model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"], model.weight_bytes);
  std::set<std::string> shards_used;
  for (const auto& [name, shard] : index["weight_map"].items()) shards_used.insert(shard);
  EXPECT_EQ(shards_used.size(), 3u);

  const ModelConfig c = ModelConfig::from_dir(dir.str());
  EXPECT_EQ(c.architecture, "Qwen2ForCausalLM");
  EXPECT_TRUE(c.attention_bias);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.torch_dtype, DType::kBF16);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.max_position_embeddings, 131072);

  const TensorStore store = TensorStore::open(dir.str());
  EXPECT_EQ(store.files().size(), 3u);
  expect_store_matches(store, expected_tensors(600, 96, 160, 3, 96, 32, true, false), DType::kBF16);
  EXPECT_EQ(store.find("model.layers.0.self_attn.o_proj.bias"), nullptr);
}

TEST(ModelGenerator, ShardingChangesOnlyTheLayout) {
  TempDir one, four;
  ModelSpec spec = model_preset("tiny");
  spec.seed = 7;
  generate_model(spec, one.str());
  spec.num_shards = 4;
  generate_model(spec, four.str());
  const TensorStore a = TensorStore::open(one.str());
  const TensorStore b = TensorStore::open(four.str());
  ASSERT_EQ(a.names(), b.names());
  EXPECT_EQ(b.files().size(), 4u);
  for (const std::string& name : a.names()) {
    const Tensor& x = a.get(name);
    const Tensor& y = b.get(name);
    ASSERT_EQ(x.size_bytes, y.size_bytes);
    EXPECT_EQ(std::memcmp(x.data, y.data, static_cast<size_t>(x.size_bytes)), 0) << name;
  }
}

TEST(ModelGenerator, SeedDecidesTheWeights) {
  TempDir a, b, c;
  ModelSpec spec = model_preset("tiny");
  spec.seed = 1;
  generate_model(spec, a.str());
  generate_model(spec, b.str());
  spec.seed = 2;
  generate_model(spec, c.str());
  auto bytes = [](const TempDir& d) {
    std::ifstream in(d.file("model.safetensors"), std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(bytes(a), bytes(b));
  EXPECT_NE(bytes(a), bytes(c));
}

TEST(ModelGenerator, TiedEmbeddingsHaveNoLmHead) {
  TempDir dir;
  ModelSpec spec = model_preset("tiny");
  spec.tie_word_embeddings = true;
  spec.dtype = DType::kF16;
  generate_model(spec, dir.str());
  EXPECT_TRUE(ModelConfig::from_dir(dir.str()).tie_word_embeddings);
  const TensorStore store = TensorStore::open(dir.str());
  expect_store_matches(store, expected_tensors(512, 64, 172, 2, 64, 32, false, true), DType::kF16);
}

TEST(ModelGenerator, RegeneratingReplacesOldShards) {
  TempDir dir;
  ModelSpec spec = model_preset("tiny");
  spec.num_shards = 2;
  generate_model(spec, dir.str());
  spec.num_shards = 1;
  generate_model(spec, dir.str());
  EXPECT_FALSE(fs::exists(dir.file("model.safetensors.index.json")));
  EXPECT_FALSE(fs::exists(dir.file("model-00001-of-00002.safetensors")));
  EXPECT_EQ(TensorStore::open(dir.str()).files().size(), 1u);
}

TEST(ModelGenerator, PresetShapes) {
  const ModelSpec coder = model_preset("ds-coder-1.3b");
  EXPECT_EQ(coder.hidden_size, 2048);
  EXPECT_EQ(coder.num_layers, 24);
  EXPECT_EQ(coder.intermediate_size, 5504);
  EXPECT_EQ(coder.vocab_size, 32256);
  EXPECT_EQ(coder.rope_scaling["type"], "linear");
  EXPECT_EQ(coder.dtype, DType::kBF16);
  // 1.35B parameters: 2 * 32256 * 2048 + 24 * (4 * 2048^2 + 3 * 2048 * 5504 + 2 * 2048) + 2048.
  int64_t params = 0;
  for (const TensorLayout& t : model_tensor_layout(coder)) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    params += n;
  }
  EXPECT_EQ(params,
            2 * 32256LL * 2048 + 24 * (4 * 2048LL * 2048 + 3 * 2048LL * 5504 + 2 * 2048) + 2048);
  const ModelSpec demo = model_preset("demo");
  EXPECT_EQ(demo.hidden_size, 256);
  EXPECT_EQ(demo.num_kv_heads, 4);
  EXPECT_TRUE(demo.demo);
  EXPECT_EQ(model_preset("r1-distill-qwen-1.5b").architecture, "Qwen2ForCausalLM");
  EXPECT_EQ(model_preset("ds-llm-7b").num_layers, 30);
}

int64_t num_parameters(const ModelSpec& spec) {
  int64_t params = 0;
  for (const TensorLayout& t : model_tensor_layout(spec)) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    params += n;
  }
  return params;
}

// The parameter counts DeepSeek publishes: V3 671B (685B with its MTP module), V2 236B,
// V2-Lite 15.7B.
TEST(ModelGenerator, DeepseekPresetsHaveThePublishedSizes) {
  ModelSpec v3 = model_preset("deepseek-v3");
  EXPECT_EQ(v3.architecture, "DeepseekV3ForCausalLM");
  EXPECT_EQ(v3.deepseek.num_nextn_predict_layers, 1);
  EXPECT_NEAR(num_parameters(v3) / 1e9, 684.5, 0.1);
  v3.deepseek.num_nextn_predict_layers = 0;
  EXPECT_NEAR(num_parameters(v3) / 1e9, 671.0, 0.1);
  const ModelSpec v2 = model_preset("deepseek-v2");
  EXPECT_EQ(v2.architecture, "DeepseekV2ForCausalLM");
  EXPECT_NEAR(num_parameters(v2) / 1e9, 235.7, 0.1);
  const ModelSpec lite = model_preset("deepseek-v2-lite");
  EXPECT_EQ(lite.deepseek.q_lora_rank, 0);
  EXPECT_NEAR(num_parameters(lite) / 1e9, 15.7, 0.1);
}

// The presets against the published files in the shared test data: DeepSeek-R1's config.json
// (V3's shape) and the inference configs of DeepSeek-V2 (236B) and V2-Lite (16B).
TEST(ModelGenerator, DeepseekPresetsMatchThePublishedConfigs) {
  const fs::path dir = pagoda::test::testdata_dir() / "hf-configs";
  const fs::path r1 = dir / "deepseek-ai-DeepSeek-R1/config.json";
  const fs::path inference = dir / "deepseek-ai-DeepSeek-V3-inference-configs";
  if (!fs::exists(r1) || !fs::exists(inference)) GTEST_SKIP() << "test data missing: " << dir;

  const json c = read_json(r1);
  const ModelSpec v3 = model_preset("deepseek-v3");
  const DeepseekSpec& d = v3.deepseek;
  EXPECT_EQ(c["architectures"][0], v3.architecture);
  EXPECT_EQ(c["hidden_size"], v3.hidden_size);
  EXPECT_EQ(c["intermediate_size"], v3.intermediate_size);
  EXPECT_EQ(c["num_hidden_layers"], v3.num_layers);
  EXPECT_EQ(c["num_attention_heads"], v3.num_heads);
  EXPECT_EQ(c["vocab_size"], v3.vocab_size);
  EXPECT_EQ(c["max_position_embeddings"], v3.max_position_embeddings);
  EXPECT_EQ(c["rope_theta"], v3.rope_theta);
  EXPECT_EQ(c["rope_scaling"], v3.rope_scaling);
  EXPECT_EQ(c["q_lora_rank"], d.q_lora_rank);
  EXPECT_EQ(c["kv_lora_rank"], d.kv_lora_rank);
  EXPECT_EQ(c["qk_nope_head_dim"], d.qk_nope_head_dim);
  EXPECT_EQ(c["qk_rope_head_dim"], d.qk_rope_head_dim);
  EXPECT_EQ(c["v_head_dim"], d.v_head_dim);
  EXPECT_EQ(c["n_routed_experts"], d.n_routed_experts);
  EXPECT_EQ(c["n_shared_experts"], d.n_shared_experts);
  EXPECT_EQ(c["num_experts_per_tok"], d.num_experts_per_tok);
  EXPECT_EQ(c["moe_intermediate_size"], d.moe_intermediate_size);
  EXPECT_EQ(c["first_k_dense_replace"], d.first_k_dense_replace);
  EXPECT_EQ(c["moe_layer_freq"], d.moe_layer_freq);
  EXPECT_EQ(c["n_group"], d.n_group);
  EXPECT_EQ(c["topk_group"], d.topk_group);
  EXPECT_EQ(c["topk_method"], d.topk_method);
  EXPECT_EQ(c["scoring_func"], d.scoring_func);
  EXPECT_EQ(c["norm_topk_prob"], d.norm_topk_prob);
  EXPECT_EQ(c["routed_scaling_factor"], d.routed_scaling_factor);
  EXPECT_EQ(c["num_nextn_predict_layers"], d.num_nextn_predict_layers);

  for (const auto& [file, preset] :
       {std::pair<std::string, std::string>{"config_236B.json", "deepseek-v2"},
        {"config_16B.json", "deepseek-v2-lite"}}) {
    const json i = read_json(inference / file);
    const ModelSpec s = model_preset(preset);
    SCOPED_TRACE(preset);
    EXPECT_EQ(i["dim"], s.hidden_size);
    EXPECT_EQ(i["inter_dim"], s.intermediate_size);
    EXPECT_EQ(i["moe_inter_dim"], s.deepseek.moe_intermediate_size);
    EXPECT_EQ(i["n_layers"], s.num_layers);
    EXPECT_EQ(i["n_dense_layers"], s.deepseek.first_k_dense_replace);
    EXPECT_EQ(i["n_heads"], s.num_heads);
    EXPECT_EQ(i["vocab_size"], s.vocab_size);
    EXPECT_EQ(i["n_routed_experts"], s.deepseek.n_routed_experts);
    EXPECT_EQ(i["n_shared_experts"], s.deepseek.n_shared_experts);
    EXPECT_EQ(i["n_activated_experts"], s.deepseek.num_experts_per_tok);
    EXPECT_EQ(i.value("n_expert_groups", 1), s.deepseek.n_group);
    EXPECT_EQ(i.value("n_limited_groups", 1), s.deepseek.topk_group);
    EXPECT_EQ(i["route_scale"], s.deepseek.routed_scaling_factor);
    EXPECT_EQ(i["q_lora_rank"], s.deepseek.q_lora_rank);
    EXPECT_EQ(i["kv_lora_rank"], s.deepseek.kv_lora_rank);
    EXPECT_EQ(i["qk_nope_head_dim"], s.deepseek.qk_nope_head_dim);
    EXPECT_EQ(i["qk_rope_head_dim"], s.deepseek.qk_rope_head_dim);
    EXPECT_EQ(i["v_head_dim"], s.deepseek.v_head_dim);
  }
}

ModelSpec tiny_deepseek(const std::string& preset) {
  ModelSpec s = model_preset(preset);
  s.num_layers = 2;
  s.hidden_size = 64;
  s.intermediate_size = 96;
  s.num_heads = 4;
  s.vocab_size = 512;
  s.max_position_embeddings = 256;
  test::shrink_deepseek_shape(s.deepseek);
  return s;
}

// The MTP layer is written under the names DeepSeek-V3's safetensors use, after the last
// decoder layer; the routing bias is fp32 as in V3.
TEST(ModelGenerator, DeepseekV3WritesTheMtpLayerUnderV3sNames) {
  TempDir dir;
  const ModelSpec spec = tiny_deepseek("deepseek-v3");
  generate_model(spec, dir.str());
  const TensorStore store = TensorStore::open(dir.str());
  const std::map<std::string, std::vector<int64_t>> mtp = {
      {"model.layers.2.embed_tokens.weight", {512, 64}},
      {"model.layers.2.enorm.weight", {64}},
      {"model.layers.2.hnorm.weight", {64}},
      {"model.layers.2.eh_proj.weight", {64, 128}},
      {"model.layers.2.shared_head.norm.weight", {64}},
      {"model.layers.2.shared_head.head.weight", {512, 64}},
      {"model.layers.2.self_attn.kv_a_proj_with_mqa.weight", {40, 64}},
      {"model.layers.2.mlp.experts.7.down_proj.weight", {64, 32}},
      {"model.layers.2.mlp.shared_experts.gate_proj.weight", {32, 64}},
  };
  for (const auto& [name, shape] : mtp) {
    const Tensor* t = store.find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->shape, shape) << name;
  }
  EXPECT_EQ(store.get("model.layers.1.mlp.gate.e_score_correction_bias").dtype, DType::kF32);
  EXPECT_EQ(store.get("model.layers.1.mlp.gate.weight").dtype, DType::kBF16);
  EXPECT_EQ(store.find("model.layers.0.mlp.gate.weight"), nullptr);  // first_k_dense_replace 1
  EXPECT_NE(store.find("model.layers.0.mlp.gate_proj.weight"), nullptr);
  EXPECT_EQ(store.find("model.layers.3.enorm.weight"), nullptr);

  const DeepseekConfig d = DeepseekConfig::from_model_config(ModelConfig::from_dir(dir.str()));
  EXPECT_EQ(d.num_layers, 2);
  EXPECT_EQ(d.num_nextn_predict_layers, 1);
  EXPECT_EQ(d.q_lora_rank, 24);
  EXPECT_EQ(d.kv_lora_rank, 32);
  EXPECT_EQ(d.router.num_experts, 8);
  EXPECT_EQ(d.router.method, MoeTopkMethod::kNoauxTc);
  EXPECT_EQ(d.router.scoring, MoeScoring::kSigmoid);
  EXPECT_TRUE(d.router.norm_topk_prob);
  EXPECT_FLOAT_EQ(d.router.routed_scaling_factor, 2.5f);
  EXPECT_EQ(d.rope.type, RopeParams::Type::kYarn);
}

TEST(ModelGenerator, DeepseekV2LiteProjectsQueriesDirectly) {
  TempDir dir;
  generate_model(tiny_deepseek("deepseek-v2-lite"), dir.str());
  const json config = read_json(dir.file("config.json"));
  EXPECT_TRUE(config["q_lora_rank"].is_null());
  EXPECT_EQ(config["model_type"], "deepseek_v2");
  EXPECT_FALSE(config.contains("num_nextn_predict_layers"));
  const TensorStore store = TensorStore::open(dir.str());
  EXPECT_NE(store.find("model.layers.0.self_attn.q_proj.weight"), nullptr);
  EXPECT_EQ(store.find("model.layers.0.self_attn.q_a_proj.weight"), nullptr);
  const DeepseekConfig d = DeepseekConfig::from_model_config(ModelConfig::from_dir(dir.str()));
  EXPECT_EQ(d.q_lora_rank, 0);
  EXPECT_EQ(d.router.method, MoeTopkMethod::kGreedy);
  EXPECT_EQ(d.num_shared_experts, 2);
}

TEST(ModelGenerator, DeepseekSpecsAreCheckedByTheLoadersRules) {
  TempDir dir;
  ModelSpec spec = tiny_deepseek("deepseek-v3");
  spec.deepseek.n_group = 8;  // 8 experts in 8 groups: noaux_tc needs 2 per group
  expect_message(error_of([&] { generate_model(spec, dir.str()); }), {"n_group"});
  EXPECT_FALSE(fs::exists(dir.file("model.safetensors")));
  spec = tiny_deepseek("deepseek-v2");
  spec.deepseek.qk_rope_head_dim = 7;
  expect_message(error_of([&] { generate_model(spec, dir.str()); }), {"qk_rope_head_dim"});
}

TEST(ModelGenerator, BadSpecs) {
  TempDir dir;
  expect_message(error_of([] { model_preset("huge"); }), {"unknown preset 'huge'", "tiny"});
  ModelSpec spec = model_preset("tiny");
  spec.architecture = "GPT2LMHeadModel";
  expect_message(error_of([&] { generate_model(spec, dir.str()); }),
                 {"architecture 'GPT2LMHeadModel'"});
  spec = model_preset("tiny");
  spec.num_kv_heads = 3;
  expect_message(error_of([&] { generate_model(spec, dir.str()); }),
                 {"--num-kv-heads 3 does not divide --num-heads 4"});
  spec = model_preset("tiny");
  spec.vocab_size = 100;
  expect_message(error_of([&] { generate_model(spec, dir.str()); }),
                 {"vocab size 100 is too small for the built-in tokenizer"});
}

TEST(ModelGenerator, TokenizerFromADirectory) {
  const fs::path src = pagoda::test::testdata_dir() / "models/stories260K-hf";
  if (!fs::exists(src / "tokenizer.json")) GTEST_SKIP() << "test data missing: " << src;
  TempDir dir;
  ModelSpec spec = model_preset("tiny");
  spec.vocab_size = 300;  // smaller than the tokenizer's 512: must grow
  spec.tokenizer_from = src.string();
  const GeneratedModel model = generate_model(spec, dir.str());
  EXPECT_EQ(model.tokenizer_vocab_size, 512);
  const ModelConfig c = ModelConfig::from_dir(dir.str());
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{2});
  EXPECT_EQ(read_json(dir.file("tokenizer.json")), read_json(src / "tokenizer.json"));
  EXPECT_EQ(read_json(dir.file("tokenizer_config.json")), read_json(src / "tokenizer_config.json"));
  EXPECT_EQ(TensorStore::open(dir.str()).get("model.embed_tokens.weight").shape[0], 512);
  // Copies stay writable even from a read-only source, so regenerating works.
  const auto perms = fs::status(dir.file("tokenizer.json")).permissions();
  EXPECT_NE(perms & fs::perms::owner_write, fs::perms::none);
  generate_model(spec, dir.str());
}

TEST(ModelGenerator, DemoModelIsCachedAndLabelled) {
  TempDir cache;
  const std::string dir = ensure_demo_model(cache.str());
  EXPECT_EQ(dir, (cache.path() / "pagoda" / "demo").string());
  const ModelConfig c = ModelConfig::from_dir(dir);
  EXPECT_EQ(c.raw["pagoda_demo"], "random weights, for trying Pagoda only");
  EXPECT_EQ(c.hidden_size, 256);
  EXPECT_EQ(c.num_hidden_layers, 4);
  EXPECT_EQ(c.vocab_size, 1024);
  EXPECT_EQ(c.torch_dtype, DType::kBF16);
  EXPECT_TRUE(fs::exists(fs::path(dir) / "tokenizer.json"));
  const auto written = fs::last_write_time(fs::path(dir) / "model.safetensors");
  EXPECT_EQ(ensure_demo_model(cache.str()), dir);  // second call reuses it
  EXPECT_EQ(fs::last_write_time(fs::path(dir) / "model.safetensors"), written);
  int entries = 0;
  for (const auto& e : fs::directory_iterator(cache.path() / "pagoda")) {
    EXPECT_EQ(e.path().filename(), "demo");  // no temporary directory left behind
    ++entries;
  }
  EXPECT_EQ(entries, 1);
}

// --- built-in tokenizer ---------------------------------------------------------------------

TEST(BuiltinTokenizer, ByteToUnicodeIsGpt2s) {
  EXPECT_EQ(byte_to_unicode('A'), "A");
  EXPECT_EQ(byte_to_unicode('~'), "~");
  EXPECT_EQ(byte_to_unicode(' '), "\u0120");   // Ġ
  EXPECT_EQ(byte_to_unicode('\n'), "\u010a");  // Ċ
  EXPECT_EQ(byte_to_unicode(0), "\u0100");
  EXPECT_EQ(byte_to_unicode(0xad), "\u0143");  // soft hyphen is not printable
  EXPECT_EQ(byte_to_unicode(0xe9), "\u00e9");
  std::set<std::string> all;
  for (int b = 0; b < 256; ++b) all.insert(byte_to_unicode(static_cast<uint8_t>(b)));
  EXPECT_EQ(all.size(), 256u);
}

TEST(BuiltinTokenizer, PretokenizerFollowsTheGpt2Regex) {
  EXPECT_EQ(
      pretokenize_gpt2("Hello world's  end, 42!\n"),
      (std::vector<std::string>{"Hello", " world", "'s", " ", " end", ",", " 42", "!", "\n"}));
}

TEST(BuiltinTokenizer, TrainerMergesTheMostFrequentPairFirst) {
  // Pairs: (a,b) x3, (Ġ,a) x2, (Ġ,c) and (c,d) x1.
  const auto merges = train_bpe("ab ab ab cd", 3);
  ASSERT_EQ(merges.size(), 3u);
  EXPECT_EQ(merges[0], (std::pair<std::string, std::string>{"a", "b"}));
  EXPECT_EQ(merges[1], (std::pair<std::string, std::string>{"\u0120", "ab"}));
  EXPECT_EQ(train_bpe(builtin_training_text(), 50), train_bpe(builtin_training_text(), 50));
}

TEST(BuiltinTokenizer, TokenizerJsonHasTheStructureHfExpects) {
  const BuiltinTokenizer tok = build_builtin_tokenizer(1024, 2048);
  EXPECT_EQ(tok.vocab_size, 1024);  // the built-in text has merges enough to fill it
  const json& j = tok.tokenizer_json;
  // Round trip through text, as a file reader would see it.
  const json parsed = json::parse(j.dump(2));
  EXPECT_EQ(parsed["version"], "1.0");
  EXPECT_EQ(parsed["pre_tokenizer"]["type"], "ByteLevel");
  EXPECT_EQ(parsed["pre_tokenizer"]["use_regex"], true);
  EXPECT_EQ(parsed["decoder"]["type"], "ByteLevel");
  const json& model = parsed["model"];
  EXPECT_EQ(model["type"], "BPE");
  ASSERT_TRUE(model["vocab"].is_object());
  ASSERT_TRUE(model["merges"].is_array());

  // Ids are exactly 0..vocab_size-1, once each.
  std::vector<int> seen(static_cast<size_t>(tok.vocab_size), 0);
  for (const auto& [token, id] : model["vocab"].items()) {
    ASSERT_TRUE(id.is_number_integer());
    ASSERT_GE(id.get<int64_t>(), 0);
    ASSERT_LT(id.get<int64_t>(), tok.vocab_size);
    ++seen[static_cast<size_t>(id.get<int64_t>())];
  }
  for (int count : seen) EXPECT_EQ(count, 1);
  // Every byte has a token; every merge joins two tokens into a third.
  for (int b = 0; b < 256; ++b) {
    EXPECT_TRUE(model["vocab"].contains(byte_to_unicode(static_cast<uint8_t>(b)))) << b;
  }
  // A merge may rebuild a token another split already made, so merges >= new ids.
  EXPECT_GE(model["merges"].size(), static_cast<size_t>(tok.vocab_size - kBuiltinMinVocabSize));
  for (const json& merge : model["merges"]) {
    const std::string m = merge.get<std::string>();
    const size_t space = m.find(' ');
    ASSERT_NE(space, std::string::npos) << m;
    ASSERT_EQ(m.find(' ', space + 1), std::string::npos) << m;
    const std::string left = m.substr(0, space);
    const std::string right = m.substr(space + 1);
    EXPECT_TRUE(model["vocab"].contains(left)) << m;
    EXPECT_TRUE(model["vocab"].contains(right)) << m;
    EXPECT_TRUE(model["vocab"].contains(left + right)) << m;
  }
  EXPECT_TRUE(model["vocab"].contains("\u0120the"));  // " the" is learned from English text

  // Special tokens: added_tokens agree with the vocab and the config.
  const std::vector<std::string> specials = {kBuiltinBosToken, kBuiltinEosToken, kBuiltinUserToken,
                                             kBuiltinAssistantToken};
  ASSERT_EQ(parsed["added_tokens"].size(), specials.size());
  for (size_t i = 0; i < specials.size(); ++i) {
    const json& added = parsed["added_tokens"][i];
    EXPECT_EQ(added["content"], specials[i]);
    EXPECT_EQ(added["id"], static_cast<int64_t>(i));
    EXPECT_EQ(added["special"], true);
    EXPECT_EQ(model["vocab"][specials[i]], static_cast<int64_t>(i));
  }
  const json& config = tok.tokenizer_config_json;
  EXPECT_EQ(config["bos_token"]["content"], kBuiltinBosToken);
  EXPECT_EQ(config["eos_token"]["content"], kBuiltinEosToken);
  EXPECT_EQ(config["add_bos_token"], true);
  EXPECT_EQ(config["model_max_length"], 2048);
  const std::string tmpl = config["chat_template"];
  EXPECT_NE(tmpl.find("<｜User｜>"), std::string::npos);
  EXPECT_NE(tmpl.find("<｜Assistant｜>"), std::string::npos);
  EXPECT_NE(tmpl.find("bos_token"), std::string::npos);
  EXPECT_NE(tmpl.find("add_generation_prompt"), std::string::npos);
}

TEST(BuiltinTokenizer, SmallVocabularyStopsEarly) {
  const BuiltinTokenizer tok = build_builtin_tokenizer(300, 512);
  EXPECT_EQ(tok.vocab_size, 300);
  EXPECT_GE(tok.tokenizer_json["model"]["merges"].size(), 40u);
  EXPECT_EQ(build_builtin_tokenizer(kBuiltinMinVocabSize, 512).vocab_size, kBuiltinMinVocabSize);
}

}  // namespace
}  // namespace pagoda
