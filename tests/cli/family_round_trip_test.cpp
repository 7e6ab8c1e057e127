// Every registered model family, through every path that reads its descriptor
// (model/model_family.h): the generator writes a checkpoint from the family's config.json
// writer and tensor table, the loader builds the family's model from it, `pagoda export-gguf`
// writes it with the family's metadata, names and export plan, and GGUF import reads it back
// into a model whose next-token logits must equal the original's. Each architecture is tried
// once from a small spec of its own and once from each of its family's presets, shrunk, so a
// family added to the registry is covered without editing this file (as long as its presets'
// special keys are DeepSeek's or none).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "cli_process.h"
#include "common/tiny_specs.h"
#include "demo/model_generator.h"
#include "kernels/host_context.h"
#include "model/logit_divergence.h"
#include "model/model_config.h"
#include "model/model_family.h"
#include "model/model_registry.h"
#include "model/model_source.h"

namespace pagoda::cli::testing {
namespace {

struct RoundTripCase {
  std::string label;  // gtest's name: the architecture, or the preset shrunk
  ModelSpec spec;
};

// A shape small enough to run in a blink that keeps what the preset chose: tied embeddings,
// grouped KV heads, query compression, experts and their routing, shared experts, MTP layers.
ModelSpec shrunk(ModelSpec s) {
  const bool grouped_kv = s.num_kv_heads < s.num_heads;
  s.hidden_size = 64;
  s.intermediate_size = 96;
  s.num_layers = 3;
  s.num_heads = 4;
  s.num_kv_heads = grouped_kv ? 2 : 4;
  s.head_dim = 0;
  s.vocab_size = 512;
  s.max_position_embeddings = 256;
  s.dtype = DType::kF32;  // so that an f32 export is exact
  s.num_shards = 1;
  pagoda::test::shrink_deepseek_shape(s.deepseek);
  return s;
}

std::vector<RoundTripCase> cases() {
  std::vector<RoundTripCase> out;
  for (const ModelFamily* family : model_families()) {
    for (const FamilyArchitecture& a : family->architectures) {
      if (a.generator_config == nullptr || a.gguf == nullptr) continue;  // nothing to round-trip
      ModelSpec spec = model_preset("tiny");
      spec.architecture = a.hf_name;
      out.push_back({a.hf_name, shrunk(spec)});
    }
    for (const ModelPreset& preset : family->generator.presets) {
      std::string label = preset.name;
      std::replace(label.begin(), label.end(), '-', '_');
      std::replace(label.begin(), label.end(), '.', '_');
      out.push_back({label, shrunk(model_preset(preset.name))});
    }
  }
  return out;
}

// gtest prints a case by its label instead of its bytes.
void PrintTo(const RoundTripCase& c, std::ostream* os) {
  *os << c.label;
}

class FamilyRoundTripTest : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(FamilyRoundTripTest, GenerateLoadExportImportGivesTheSameLogits) {
  const RoundTripCase& c = GetParam();
  const Scratch scratch;
  const std::string dir = scratch.path("model"), gguf = scratch.path("model.f32.gguf");
  generate_model(c.spec, dir);

  const ModelSource source = open_model_source(dir);
  EXPECT_EQ(source.config.architecture, c.spec.architecture);
  const auto original =
      create_model(host_execution_context(), source.config, source.tensors, ModelOptions{});

  const RunResult exported =
      run_pagoda({"export-gguf", "--model", dir, "--type", "f32", "--out", gguf}, scratch.dir());
  ASSERT_EQ(exported.exit_code, 0) << exported.err;

  // GGUF has one name for DeepSeek-V2 and V3: import tells them apart by the gating function
  // (written for dense models too) and the router's correction bias.
  const ModelSource imported = open_model_source(gguf);
  EXPECT_EQ(imported.config.architecture, source.config.architecture);
  EXPECT_EQ(&model_family_of(imported.config), &model_family_of(source.config));
  EXPECT_EQ(imported.config.hidden_size, source.config.hidden_size);
  EXPECT_EQ(imported.config.num_hidden_layers, source.config.num_hidden_layers);
  EXPECT_EQ(imported.config.num_attention_heads, source.config.num_attention_heads);
  EXPECT_EQ(imported.config.num_key_value_heads, source.config.num_key_value_heads);
  EXPECT_EQ(imported.config.vocab_size, source.config.vocab_size);
  EXPECT_EQ(imported.config.tie_word_embeddings, source.config.tie_word_embeddings);
  const auto reloaded =
      create_model(host_execution_context(), imported.config, imported.tensors, ModelOptions{});

  // The same f32 weights, renamed, stacked, split or permuted and back: the logits may differ
  // only by the order of float sums (absorbed vs stored MLA matrices), far below any change of
  // a weight.
  std::vector<int32_t> tokens;
  for (int32_t i = 0; i < 24; ++i) tokens.push_back((i * 37 + 11) % 512);
  const LogitDivergence d = compare_next_token_distributions(*original, *reloaded, tokens);
  EXPECT_EQ(d.top1_agreement, 1.0);
  EXPECT_LT(d.mean_abs_logit_diff, 1e-4);
  EXPECT_LT(d.max_kl, 1e-6);
  std::printf("[ %s ] top-1 agreement %.3f, mean |logit diff| %.3g, max KL %.3g\n", c.label.c_str(),
              d.top1_agreement, d.mean_abs_logit_diff, d.max_kl);
}

INSTANTIATE_TEST_SUITE_P(Registered, FamilyRoundTripTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<RoundTripCase>& info) {
                           return info.param.label;
                         });

// The descriptors are complete: every architecture writes a config.json that parses back to
// itself and exports as some GGUF architecture, and every preset names a registered one.
TEST(FamilyDescriptors, EveryArchitectureAndPresetIsServedByItsFamily) {
  for (const ModelFamily* family : model_families()) {
    EXPECT_NE(family->generator.check, nullptr) << family->name;
    EXPECT_NE(family->describe, nullptr) << family->name;
    for (const FamilyArchitecture& a : family->architectures) {
      ASSERT_NE(a.generator_config, nullptr) << a.hf_name;
      ASSERT_NE(a.gguf, nullptr) << a.hf_name;
      ModelSpec spec = model_preset("tiny");
      spec.architecture = a.hf_name;
      const ModelConfig config =
          ModelConfig::from_json(a.generator_config(shrunk(spec), 512), "config.json");
      EXPECT_EQ(config.architecture, a.hf_name);
      EXPECT_EQ(find_model_family(a.hf_name), family);
    }
    for (const ModelPreset& preset : family->generator.presets) {
      EXPECT_EQ(find_model_family(preset.spec().architecture), family) << preset.name;
    }
  }
}

}  // namespace
}  // namespace pagoda::cli::testing
