// ModelConfig and GenerationConfig: the real configs in the shared test data, defaults,
// every rope_scaling kind, and one test per kind of bad config.json.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/test_paths.h"
#include "model/generation_config.h"
#include "model/model_config.h"
#include "test_helpers.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::error_of;
using test::expect_message;
using test::TempDir;

const fs::path kTestData = pagoda::test::testdata_dir();

// A valid minimal Llama config.json to break one key at a time.
json llama_json() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"hidden_size", 64},
          {"intermediate_size", 172},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 8},
          {"vocab_size", 512}};
}

ModelConfig parse(const json& j) {
  return ModelConfig::from_json(j, "m/config.json");
}

void write(const TempDir& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir.file(name)) << text;
}

TEST(ModelConfig, ParsesR1DistillQwen32B) {
  const fs::path dir = kTestData / "hf-configs/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B";
  if (!fs::exists(dir / "config.json")) GTEST_SKIP() << "test data missing: " << dir;
  const ModelConfig c = ModelConfig::from_dir(dir.string());
  EXPECT_EQ(c.architecture, "Qwen2ForCausalLM");
  EXPECT_EQ(c.model_type, "qwen2");
  EXPECT_EQ(c.config_path, (dir / "config.json").string());
  EXPECT_EQ(c.hidden_size, 5120);
  EXPECT_EQ(c.intermediate_size, 27648);
  EXPECT_EQ(c.num_hidden_layers, 64);
  EXPECT_EQ(c.num_attention_heads, 40);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1000000.0);
  EXPECT_EQ(c.rope_scaling.type, "default");
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_EQ(c.vocab_size, 152064);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_TRUE(c.attention_bias);  // Qwen2: q/k/v always biased
  EXPECT_FALSE(c.o_proj_bias);
  EXPECT_EQ(c.torch_dtype, DType::kBF16);
  EXPECT_EQ(c.bos_token_id, 151643);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{151643});
  EXPECT_EQ(c.raw["sliding_window"], 131072);  // family-specific keys stay readable
  EXPECT_EQ(c.q_size(), 5120);
  EXPECT_EQ(c.kv_size(), 1024);

  const GenerationConfig g = GenerationConfig::from_dir(dir.string());
  EXPECT_EQ(g.bos_token_id, 151646);
  EXPECT_EQ(g.eos_token_ids, std::vector<int64_t>{151643});
  EXPECT_EQ(g.do_sample, true);
  EXPECT_DOUBLE_EQ(*g.temperature, 0.6);
  EXPECT_DOUBLE_EQ(*g.top_p, 0.95);
  const SamplingParams p = g.default_sampling_params();
  EXPECT_FLOAT_EQ(p.temperature, 0.6f);
  EXPECT_FLOAT_EQ(p.top_p, 0.95f);
  EXPECT_EQ(p.top_k, 0);
}

TEST(ModelConfig, ParsesStories260K) {
  const fs::path dir = kTestData / "models/stories260K-hf";
  if (!fs::exists(dir / "config.json")) GTEST_SKIP() << "test data missing: " << dir;
  const ModelConfig c = ModelConfig::from_dir(dir.string());
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.dir, dir.string());
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 172);
  EXPECT_EQ(c.num_hidden_layers, 5);
  EXPECT_EQ(c.num_attention_heads, 8);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.max_position_embeddings, 512);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.rope_scaling.type, "default");
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.o_proj_bias);
  EXPECT_EQ(c.torch_dtype, DType::kF32);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{2});

  const GenerationConfig g = GenerationConfig::from_dir(dir.string());
  EXPECT_EQ(g.bos_token_id, 1);
  EXPECT_EQ(g.eos_token_ids, std::vector<int64_t>{2});
  EXPECT_FALSE(g.do_sample.has_value());
  EXPECT_FLOAT_EQ(g.default_sampling_params().temperature, 1.0f);  // vLLM's default
}

TEST(ModelConfig, ParsesDeepSeekR1YarnScaling) {
  // An architecture this room does not judge: the common keys still parse.
  const fs::path dir = kTestData / "hf-configs/deepseek-ai-DeepSeek-R1";
  if (!fs::exists(dir / "config.json")) GTEST_SKIP() << "test data missing: " << dir;
  const ModelConfig c = ModelConfig::from_dir(dir.string());
  EXPECT_EQ(c.architecture, "DeepseekV3ForCausalLM");
  EXPECT_EQ(c.hidden_size, 7168);
  EXPECT_EQ(c.rope_scaling.type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 40.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 4096);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_slow, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.mscale, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.mscale_all_dim, 1.0);
  EXPECT_EQ(c.raw["kv_lora_rank"], 512);
}

TEST(ModelConfig, DefaultsFollowTransformers) {
  const ModelConfig c = parse(llama_json());
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.torch_dtype, DType::kF32);
  EXPECT_FALSE(c.bos_token_id.has_value());
  EXPECT_TRUE(c.eos_token_ids.empty());
  EXPECT_EQ(c.rope_scaling.type, "default");
}

TEST(ModelConfig, LlamaAttentionBiasCoversOProj) {
  json j = llama_json();
  j["attention_bias"] = true;
  j["mlp_bias"] = true;
  const ModelConfig c = parse(j);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_TRUE(c.o_proj_bias);
  EXPECT_TRUE(c.mlp_bias);
}

TEST(ModelConfig, ExplicitHeadDimAndNewDtypeKey) {
  json j = llama_json();
  j["head_dim"] = 16;  // need not equal hidden / heads
  j["dtype"] = "float16";
  j["num_key_value_heads"] = 2;
  const ModelConfig c = parse(j);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.q_size(), 128);
  EXPECT_EQ(c.kv_size(), 32);
  EXPECT_EQ(c.torch_dtype, DType::kF16);
}

TEST(ModelConfig, TokenIdsAsIntListOrNull) {
  json j = llama_json();
  j["bos_token_id"] = nullptr;
  j["eos_token_id"] = {7, 9};
  ModelConfig c = parse(j);
  EXPECT_FALSE(c.bos_token_id.has_value());
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{7, 9}));
  j["bos_token_id"] = {3, 4};
  j["eos_token_id"] = nullptr;
  c = parse(j);
  EXPECT_EQ(c.bos_token_id, 3);
  EXPECT_TRUE(c.eos_token_ids.empty());
}

TEST(ModelConfig, RopeScalingKinds) {
  json j = llama_json();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
  ModelConfig c = parse(j);
  EXPECT_EQ(c.rope_scaling.type, "linear");
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 4.0);

  j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2}};
  c = parse(j);
  EXPECT_EQ(c.rope_scaling.type, "dynamic");
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 2.0);

  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  c = parse(j);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_DOUBLE_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);

  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}, {"attention_factor", 1.2}};
  c = parse(j);
  EXPECT_EQ(c.rope_scaling.type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope_scaling.attention_factor, 1.2);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_fast, 32.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 0);

  j["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_EQ(parse(j).rope_scaling.type, "default");
  j["rope_scaling"] = nullptr;
  EXPECT_EQ(parse(j).rope_scaling.type, "default");
}

// --- bad input ----------------------------------------------------------------------------

TEST(ModelConfigErrors, MissingConfigJson) {
  TempDir dir;
  expect_message(error_of([&] { ModelConfig::from_dir(dir.str()); }),
                 {dir.file("config.json"), "cannot open"});
}

TEST(ModelConfigErrors, GarbledJson) {
  TempDir dir;
  write(dir, "config.json", "{\"hidden_size\": 64,\n \"vocab_size\": }");
  expect_message(error_of([&] { ModelConfig::from_dir(dir.str()); }),
                 {dir.file("config.json"), "not valid JSON"});
  write(dir, "config.json", "[1, 2]");
  expect_message(error_of([&] { ModelConfig::from_dir(dir.str()); }),
                 {dir.file("config.json"), "expected a JSON object"});
}

TEST(ModelConfigErrors, MissingKey) {
  for (const char* key : {"architectures", "hidden_size", "intermediate_size", "num_hidden_layers",
                          "num_attention_heads", "vocab_size"}) {
    json j = llama_json();
    j.erase(key);
    expect_message(error_of([&] { parse(j); }),
                   {"m/config.json: key '" + std::string(key) + "' is missing"});
  }
}

TEST(ModelConfigErrors, WrongType) {
  json j = llama_json();
  j["hidden_size"] = "64";
  expect_message(error_of([&] { parse(j); }),
                 {"m/config.json: key 'hidden_size' must be an integer", "string"});
  j = llama_json();
  j["num_hidden_layers"] = 2.5;
  expect_message(error_of([&] { parse(j); }), {"key 'num_hidden_layers' must be an integer"});
  j = llama_json();
  j["rms_norm_eps"] = "small";
  expect_message(error_of([&] { parse(j); }), {"key 'rms_norm_eps' must be a number"});
  j = llama_json();
  j["tie_word_embeddings"] = 1;
  expect_message(error_of([&] { parse(j); }), {"key 'tie_word_embeddings' must be true or false"});
  j = llama_json();
  j["architectures"] = "LlamaForCausalLM";
  expect_message(error_of([&] { parse(j); }),
                 {"key 'architectures' must be a non-empty list of strings"});
  j = llama_json();
  j["eos_token_id"] = "</s>";
  expect_message(error_of([&] { parse(j); }), {"key 'eos_token_id' must be an id"});
  j = llama_json();
  j["rope_scaling"] = 4;
  expect_message(error_of([&] { parse(j); }), {"key 'rope_scaling' must be null or an object"});
}

TEST(ModelConfigErrors, NonPositiveSizes) {
  for (const char* key : {"hidden_size", "vocab_size", "num_hidden_layers"}) {
    for (int value : {0, -4}) {
      json j = llama_json();
      j[key] = value;
      expect_message(error_of([&] { parse(j); }),
                     {"m/config.json: key '" + std::string(key) + "' must be positive, got " +
                      std::to_string(value)});
    }
  }
  json j = llama_json();
  j["rms_norm_eps"] = 0;
  expect_message(error_of([&] { parse(j); }), {"key 'rms_norm_eps' must be positive"});
}

TEST(ModelConfigErrors, HeadsMustDivide) {
  json j = llama_json();
  j["num_attention_heads"] = 6;  // 64 % 6 != 0
  expect_message(error_of([&] { parse(j); }), {"m/config.json",
                                               "key 'num_attention_heads' (6) does not divide key "
                                               "'hidden_size' (64)"});
  j = llama_json();
  j["num_key_value_heads"] = 3;
  expect_message(error_of([&] { parse(j); }),
                 {"key 'num_key_value_heads' (3) does not divide key 'num_attention_heads' (8)"});
}

TEST(ModelConfigErrors, UnknownDtypeAndRopeType) {
  json j = llama_json();
  j["torch_dtype"] = "float8_e4m3";
  expect_message(error_of([&] { parse(j); }),
                 {"key 'torch_dtype' has unsupported value 'float8_e4m3'"});
  j = llama_json();
  j["rope_scaling"] = {{"type", "longrope"}, {"factor", 2.0}};
  expect_message(error_of([&] { parse(j); }),
                 {"key 'rope_scaling.type' has unsupported value 'longrope'"});
  j["rope_scaling"] = {{"type", "linear"}};
  expect_message(error_of([&] { parse(j); }), {"key 'rope_scaling.factor' is missing"});
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 0.5}};
  expect_message(error_of([&] { parse(j); }), {"key 'rope_scaling.factor' must be at least 1"});
  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  expect_message(error_of([&] { parse(j); }), {"key 'rope_scaling.low_freq_factor' is missing"});
}

TEST(GenerationConfig, MissingFileIsEmpty) {
  TempDir dir;
  const GenerationConfig g = GenerationConfig::from_dir(dir.str());
  EXPECT_FALSE(g.temperature.has_value());
  EXPECT_TRUE(g.eos_token_ids.empty());
  EXPECT_FLOAT_EQ(g.default_sampling_params().temperature, 1.0f);
}

// vLLM's --generation-config: auto keeps the model's, vllm keeps only its token ids, a directory
// replaces it (and must hold the file).
TEST(GenerationConfig, SelectAutoVllmOrADirectory) {
  TempDir model, other;
  write(model, "generation_config.json",
        R"({"temperature": 0.6, "top_p": 0.9, "eos_token_id": [7, 8], "bos_token_id": 0})");
  write(other, "generation_config.json", R"({"temperature": 0.2, "eos_token_id": 9})");
  const GenerationConfig own = GenerationConfig::from_dir(model.str());
  EXPECT_FLOAT_EQ(*GenerationConfig::select("auto", own).temperature, 0.6);
  const GenerationConfig vllm = GenerationConfig::select("vllm", own);
  EXPECT_FALSE(vllm.temperature.has_value());
  EXPECT_FALSE(vllm.top_p.has_value());
  EXPECT_FLOAT_EQ(vllm.default_sampling_params().temperature, 1.0f);
  EXPECT_EQ(vllm.eos_token_ids, (std::vector<int64_t>{7, 8}));
  EXPECT_EQ(vllm.bos_token_id, 0);
  const GenerationConfig dir = GenerationConfig::select(other.str(), own);
  EXPECT_FLOAT_EQ(*dir.temperature, 0.2);
  EXPECT_EQ(dir.eos_token_ids, (std::vector<int64_t>{9}));
  TempDir empty;
  expect_message(error_of([&] { GenerationConfig::select(empty.str(), own); }),
                 {"--generation-config", "generation_config.json not found"});
}

TEST(GenerationConfig, DoSampleFalseMeansGreedy) {
  TempDir dir;
  write(dir, "generation_config.json",
        R"({"do_sample": false, "temperature": 0.7, "top_k": 20, "repetition_penalty": 1.1,
            "max_new_tokens": 64, "eos_token_id": [1, 32021], "bos_token_id": 0})");
  const GenerationConfig g = GenerationConfig::from_dir(dir.str());
  EXPECT_EQ(g.eos_token_ids, (std::vector<int64_t>{1, 32021}));
  EXPECT_EQ(g.bos_token_id, 0);
  const SamplingParams p = g.default_sampling_params();
  EXPECT_TRUE(p.greedy());
  EXPECT_EQ(p.top_k, 20);
  EXPECT_FLOAT_EQ(p.repetition_penalty, 1.1f);
  EXPECT_EQ(p.max_tokens, 64);
}

TEST(GenerationConfig, BadValues) {
  TempDir dir;
  write(dir, "generation_config.json", R"({"temperature": "hot"})");
  expect_message(error_of([&] { GenerationConfig::from_dir(dir.str()); }),
                 {dir.file("generation_config.json"), "key 'temperature' must be a number"});
  write(dir, "generation_config.json", R"({"top_p": 1.5})");
  expect_message(error_of([&] { GenerationConfig::from_dir(dir.str()); }),
                 {"key 'top_p' must be in (0, 1]"});
  write(dir, "generation_config.json", R"({"do_sample": "yes"})");
  expect_message(error_of([&] { GenerationConfig::from_dir(dir.str()); }),
                 {"key 'do_sample' must be true or false"});
  write(dir, "generation_config.json", "{,}");
  expect_message(error_of([&] { GenerationConfig::from_dir(dir.str()); }),
                 {dir.file("generation_config.json"), "not valid JSON"});
}

}  // namespace
}  // namespace pagoda
