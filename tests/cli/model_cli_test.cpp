// make-model's DeepSeek presets, info and tokenize/detokenize, run as a user runs them: each
// DeepSeek preset shrunk by flags loads and generates with `pagoda generate`; `pagoda info`
// names the KV dtype, the weight format (float, int8, GGUF Q8_0) and the MLA/MoE layout;
// tokenize/detokenize take a directory, `demo` and a GGUF file alike; make-draft's drafts keep
// generate's greedy tokens; an int8 checkpoint mapped and packed into lane panels generates
// what its huge-page copy does.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli_process.h"

namespace pagoda::cli::testing {
namespace {

// Flags that shrink any DeepSeek preset to a model that runs in a blink, keeping its choices
// (q compression on or off, routing method, scoring, MTP layer).
std::vector<std::string> tiny_deepseek_flags() {
  return {"--num-layers",
          "2",
          "--hidden-size",
          "64",
          "--intermediate-size",
          "96",
          "--num-heads",
          "4",
          "--vocab-size",
          "512",
          "--max-position-embeddings",
          "256",
          "--kv-lora-rank",
          "32",
          "--qk-nope-head-dim",
          "16",
          "--qk-rope-head-dim",
          "8",
          "--v-head-dim",
          "16",
          "--n-routed-experts",
          "8",
          "--num-experts-per-tok",
          "2",
          "--moe-intermediate-size",
          "32",
          "--first-k-dense-replace",
          "1"};
}

struct DeepseekCase {
  std::string preset;
  std::vector<std::string> extra;  // what the shrunk expert count needs (groups of experts)
  std::vector<std::string> info_lines;
};

class DeepseekPresetTest : public ::testing::TestWithParam<DeepseekCase> {};

TEST_P(DeepseekPresetTest, ShrunkPresetLoadsGeneratesAndShowsItsLayout) {
  const DeepseekCase& c = GetParam();
  const Scratch scratch;
  const std::string dir = scratch.path("model");
  std::vector<std::string> args = {"make-model", "--preset", c.preset, "--out", dir};
  const std::vector<std::string> tiny = tiny_deepseek_flags();
  args.insert(args.end(), tiny.begin(), tiny.end());
  args.insert(args.end(), c.extra.begin(), c.extra.end());
  const RunResult made = run_pagoda(args, scratch.dir());
  ASSERT_EQ(made.exit_code, 0) << made.err;

  const RunResult generated =
      run_pagoda({"generate", "--model", dir, "--prompt", "hello world", "--max-tokens", "5",
                  "--temperature", "0", "--ignore-eos", "--json"},
                 scratch.dir());
  ASSERT_EQ(generated.exit_code, 0) << generated.err;
  const nlohmann::json out = nlohmann::json::parse(generated.out);
  EXPECT_EQ(out["token_ids"].size(), 5u) << generated.out;

  const RunResult info = run_pagoda({"info", "--model", dir}, scratch.dir());
  ASSERT_EQ(info.exit_code, 0) << info.err;
  for (const std::string& line : c.info_lines) {
    EXPECT_NE(info.out.find(line), std::string::npos) << "expected '" << line << "' in\n"
                                                      << info.out;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Presets, DeepseekPresetTest,
    ::testing::Values(
        DeepseekCase{
            "deepseek-v2",
            {"--q-lora-rank", "24", "--n-group", "4", "--topk-group", "2"},
            {"architecture:       DeepseekV2ForCausalLM", "MLA", "q_lora_rank:      24",
             "kv_lora_rank:     32", "16 nope + 8 rope", "v_head_dim:       16",
             "8 routed + 2 shared, 2 per token", "MoE layers:       1 of 2 (first 1 dense",
             "softmax scores, group_limited_greedy (4 groups, 2 per token)",
             "routed_scaling_factor 16", "weight format:      bf16", "KV cache dtype:     fp16"}},
        DeepseekCase{"deepseek-v2-lite",
                     {},
                     {"architecture:       DeepseekV2ForCausalLM", "q_lora_rank:      none",
                      "8 routed + 2 shared, 2 per token", "softmax scores, greedy"}},
        DeepseekCase{
            "deepseek-v3",
            {"--q-lora-rank", "24", "--n-group", "4", "--topk-group", "2"},
            {"architecture:       DeepseekV3ForCausalLM", "q_lora_rank:      24",
             "8 routed + 1 shared, 2 per token", "sigmoid scores, noaux_tc (4 groups, 2 per token)",
             "norm_topk_prob true, routed_scaling_factor 2.5", "MTP layers:         1"}}),
    [](const ::testing::TestParamInfo<DeepseekCase>& info) {
      std::string name = info.param.preset;
      for (char& ch : name) {
        if (ch == '-') ch = '_';
      }
      return name;
    });

TEST(MakeModelCli, DeepseekGroupsThatDoNotFitTheExpertsAreRefusedNamingTheKey) {
  const Scratch scratch;
  std::vector<std::string> args = {"make-model", "--preset", "deepseek-v3", "--out",
                                   scratch.path("m")};
  const std::vector<std::string> tiny = tiny_deepseek_flags();
  args.insert(args.end(), tiny.begin(), tiny.end());  // 8 experts in V3's 8 groups: 1 per group
  const RunResult r = run_pagoda(args, scratch.dir());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("n_group"), std::string::npos) << r.err;
}

TEST(MakeModelCli, DeepseekFlagsOnADenseModelAreRefused) {
  const Scratch scratch;
  const RunResult r = run_pagoda(
      {"make-model", "--preset", "tiny", "--out", scratch.path("m"), "--n-routed-experts", "4"},
      scratch.dir());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("DeepSeek models only"), std::string::npos) << r.err;
}

// A tiny Llama, its int8 checkpoint and a Q8_0 GGUF of it.
struct TinyModels {
  std::string dir, int8_dir, gguf;
};

TinyModels make_tiny_models(const Scratch& scratch) {
  TinyModels m{scratch.path("tiny"), scratch.path("tiny-int8"), scratch.path("tiny.q8_0.gguf")};
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"make-model", "--preset", "tiny", "--out", m.dir},
        std::vector<std::string>{"quantize", "--model", m.dir, "--to", "int8", "--out", m.int8_dir},
        std::vector<std::string>{"export-gguf", "--model", m.dir, "--type", "q8_0", "--out",
                                 m.gguf}}) {
    const RunResult r = run_pagoda(args, scratch.dir());
    EXPECT_EQ(r.exit_code, 0) << args.front() << ": " << r.err;
  }
  return m;
}

TEST(InfoCli, NamesTheEnginesKvDtypeAndTheStoredWeightFormat) {
  const Scratch scratch;
  const TinyModels m = make_tiny_models(scratch);

  const RunResult plain = run_pagoda({"info", "--model", m.dir}, scratch.dir());
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_NE(plain.out.find("weight format:      f32\n"), std::string::npos) << plain.out;
  EXPECT_NE(plain.out.find("KV cache dtype:     fp16 (--kv-cache-dtype auto)"), std::string::npos)
      << plain.out;
  // tiny: 2 layers x 2 kv heads x (16 + 16) values x 2 bytes.
  EXPECT_NE(plain.out.find("KV bytes per token: 256 B"), std::string::npos) << plain.out;

  const RunResult fp32 =
      run_pagoda({"info", "--model", m.dir, "--kv-cache-dtype", "fp32"}, scratch.dir());
  ASSERT_EQ(fp32.exit_code, 0) << fp32.err;
  EXPECT_NE(fp32.out.find("KV cache dtype:     fp32"), std::string::npos) << fp32.out;
  EXPECT_NE(fp32.out.find("KV bytes per token: 512 B"), std::string::npos) << fp32.out;

  const RunResult int8 = run_pagoda({"info", "--model", m.int8_dir}, scratch.dir());
  ASSERT_EQ(int8.exit_code, 0) << int8.err;
  EXPECT_NE(int8.out.find("weight format:      int8 (group"), std::string::npos) << int8.out;

  const std::string int4_dir = scratch.path("tiny-int4");
  const RunResult quantized =
      run_pagoda({"quantize", "--model", m.dir, "--to", "int4", "--out", int4_dir}, scratch.dir());
  ASSERT_EQ(quantized.exit_code, 0) << quantized.err;
  const RunResult int4 = run_pagoda({"info", "--model", int4_dir}, scratch.dir());
  ASSERT_EQ(int4.exit_code, 0) << int4.err;
  EXPECT_NE(int4.out.find("weight format:      int4 (group 32)"), std::string::npos) << int4.out;

  const RunResult gguf = run_pagoda({"info", "--model", m.gguf}, scratch.dir());
  ASSERT_EQ(gguf.exit_code, 0) << gguf.err;
  EXPECT_NE(gguf.out.find("weight format:      Q8_0"), std::string::npos) << gguf.out;
}

// An FP8 checkpoint as DeepSeek publishes them (make-model --dtype fp8, here a shrunk V3):
// generated with each --fp8-weights mode, shown by info as what it became, and read by
// quantize.
TEST(Fp8Cli, MakeModelFp8LoadsInEveryModeAndQuantizes) {
  const Scratch scratch;
  const std::string dir = scratch.path("v3-fp8");
  std::vector<std::string> args = {
      "make-model",   "--preset", "deepseek-v3",  "--out", dir, "--dtype", "fp8", "--n-group", "1",
      "--topk-group", "1",        "--mtp-layers", "0"};
  const std::vector<std::string> tiny = tiny_deepseek_flags();
  args.insert(args.end(), tiny.begin(), tiny.end());
  const RunResult made = run_pagoda(args, scratch.dir());
  ASSERT_EQ(made.exit_code, 0) << made.err;
  for (const char* mode : {"dequant", "int8", "int4"}) {
    const RunResult generated =
        run_pagoda({"generate", "--model", dir, "--prompt", "hello world", "--max-tokens", "3",
                    "--temperature", "0", "--ignore-eos", "--json", "--fp8-weights", mode},
                   scratch.dir());
    ASSERT_EQ(generated.exit_code, 0) << mode << ": " << generated.err;
    EXPECT_EQ(nlohmann::json::parse(generated.out)["token_ids"].size(), 3u) << generated.out;
  }
  const RunResult info = run_pagoda({"info", "--model", dir}, scratch.dir());
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("fp8 (as int8, group"), std::string::npos) << info.out;
  const RunResult quality = run_pagoda(
      {"bench", "quality", "--model", dir, "--fp8-weights", "int8", "--json"}, scratch.dir());
  ASSERT_EQ(quality.exit_code, 0) << quality.err;
  const nlohmann::json q = nlohmann::json::parse(quality.out);
  EXPECT_GT(q["mean_kl"].get<double>(), 0.0) << quality.out;
  EXPECT_LT(q["mean_kl"].get<double>(), 0.05) << quality.out;

  const std::string int4_dir = scratch.path("v3-int4");
  const RunResult quantized =
      run_pagoda({"quantize", "--model", dir, "--to", "int4", "--out", int4_dir}, scratch.dir());
  ASSERT_EQ(quantized.exit_code, 0) << quantized.err;
  const RunResult int4 = run_pagoda({"info", "--model", int4_dir}, scratch.dir());
  ASSERT_EQ(int4.exit_code, 0) << int4.err;
  EXPECT_NE(int4.out.find("int4 (group 32)"), std::string::npos) << int4.out;
  EXPECT_EQ(int4.out.find("fp8"), std::string::npos) << int4.out;
}

TEST(InfoCli, ADeepseekGgufFileShowsItsLayoutAndItsGgmlTypes) {
  const Scratch scratch;
  const std::string dir = scratch.path("v3"), gguf = scratch.path("v3.q8_0.gguf");
  std::vector<std::string> args = {
      "make-model", "--preset",  "deepseek-v3", "--out",        dir, "--q-lora-rank",
      "32",         "--n-group", "4",           "--topk-group", "2"};
  const std::vector<std::string> tiny = tiny_deepseek_flags();
  args.insert(args.end(), tiny.begin(), tiny.end());
  ASSERT_EQ(run_pagoda(args, scratch.dir()).exit_code, 0);
  const RunResult exported =
      run_pagoda({"export-gguf", "--model", dir, "--type", "q8_0", "--out", gguf}, scratch.dir());
  ASSERT_EQ(exported.exit_code, 0) << exported.err;

  const RunResult info = run_pagoda({"info", "--model", gguf}, scratch.dir());
  ASSERT_EQ(info.exit_code, 0) << info.err;
  for (const char* line : {"architecture:       DeepseekV3ForCausalLM", "kv_lora_rank:     32",
                           "8 routed + 1 shared, 2 per token", "sigmoid scores, noaux_tc",
                           "weight format:      Q8_0 "}) {
    EXPECT_NE(info.out.find(line), std::string::npos) << "expected '" << line << "' in\n"
                                                      << info.out;
  }
}

TEST(TokenizeCli, ADirectoryTheDemoModelAndAGgufFileAllTokenize) {
  const Scratch scratch;
  const TinyModels m = make_tiny_models(scratch);
  const std::vector<std::string> env = {"XDG_CACHE_HOME=" + scratch.path("cache")};
  const std::string text = "hello world, again";

  std::vector<std::string> ids_by_model;
  for (const std::string& model : {m.dir, m.gguf, std::string("demo")}) {
    const RunResult ids = run_pagoda({"tokenize", "--model", model, text}, scratch.dir(), env);
    ASSERT_EQ(ids.exit_code, 0) << model << ": " << ids.err;
    ASSERT_FALSE(ids.out.empty()) << model;
    ids_by_model.push_back(ids.out);

    std::vector<std::string> detokenize = {"detokenize", "--model", model};
    std::istringstream words(ids.out);
    for (std::string id; words >> id;) detokenize.push_back(id);
    const RunResult back = run_pagoda(detokenize, scratch.dir(), env);
    ASSERT_EQ(back.exit_code, 0) << model << ": " << back.err;
    EXPECT_EQ(back.out, text + "\n") << model;
  }
  // The GGUF file carries the directory's tokenizer.
  EXPECT_EQ(ids_by_model[0], ids_by_model[1]);
}

// An int8 checkpoint on the avx2 table, which reads int8 in 16 x 2 lane panels: --weights-memory
// auto maps it (engine/weights_memory.h), each matrix is packed from the map and its file pages
// dropped, and the tokens are those of the huge-page copy, which is used row-major. Skipped
// where the CPU (or the build) has no avx2.
TEST(GenerateCli, AnInt8CheckpointMappedAndPackedForAvx2GeneratesTheCopysTokens) {
  const Scratch scratch;
  const TinyModels m = make_tiny_models(scratch);
  auto generate = [&](const std::string& weights_memory) {
    return run_pagoda({"generate", "--model", m.int8_dir, "--isa", "avx2", "--weights-memory",
                       weights_memory, "--prompt", "Once upon a time", "--max-tokens", "24",
                       "--ignore-eos", "--temperature", "0", "--json", "--log-level", "info"},
                      scratch.dir());
  };
  const RunResult automatic = generate("auto");
  if (automatic.exit_code != 0 && automatic.err.find("avx2") != std::string::npos &&
      (automatic.err.find("not supported by this CPU") != std::string::npos ||
       automatic.err.find("not in") != std::string::npos)) {
    GTEST_SKIP() << "no avx2 kernels here: " << automatic.err;
  }
  ASSERT_EQ(automatic.exit_code, 0) << automatic.err;
  EXPECT_NE(automatic.err.find("weights memory: mmap (--weights-memory auto)"), std::string::npos)
      << automatic.err;
  const RunResult copied = generate("huge-pages");
  ASSERT_EQ(copied.exit_code, 0) << copied.err;
  EXPECT_NE(copied.err.find("weights memory: huge-pages\n"), std::string::npos) << copied.err;

  const nlohmann::json mapped_output = nlohmann::json::parse(automatic.out);
  const nlohmann::json copied_output = nlohmann::json::parse(copied.out);
  ASSERT_EQ(mapped_output["token_ids"].size(), 24u) << automatic.out;
  EXPECT_EQ(mapped_output["token_ids"], copied_output["token_ids"]);
  EXPECT_EQ(mapped_output["text"], copied_output["text"]);
}

// make-draft derives drafts `generate` takes as a draft model: greedy tokens are plain
// decoding's whatever the draft (its first layer with noise, unrelated weights).
TEST(MakeDraftCli, DerivedDraftsKeepGenerateGreedyTokens) {
  const Scratch scratch;
  const std::string target = scratch.path("target");
  ASSERT_EQ(
      run_pagoda({"make-model", "--preset", "tiny", "--out", target}, scratch.dir()).exit_code, 0);
  const auto generate = [&](const std::string& draft) {
    std::vector<std::string> args = {"generate",    "--model",      target,  "--prompt",
                                     "hello world", "--max-tokens", "12",    "--temperature",
                                     "0",           "--ignore-eos", "--json"};
    if (!draft.empty()) {
      args.insert(args.end(), {"--speculative-config",
                               "{\"model\": \"" + draft + "\", \"num_speculative_tokens\": 3}"});
    }
    const RunResult r = run_pagoda(args, scratch.dir());
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out)["token_ids"] : nlohmann::json();
  };
  const nlohmann::json plain = generate("");
  ASSERT_EQ(plain.size(), 12u);
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{"--num-layers", "1", "--noise", "0.2"},
        std::vector<std::string>{"--randomize"}}) {
    const std::string draft = scratch.path("draft" + flags.front());
    std::vector<std::string> args = {"make-draft", "--from", target, "--out", draft};
    args.insert(args.end(), flags.begin(), flags.end());
    const RunResult made = run_pagoda(args, scratch.dir());
    ASSERT_EQ(made.exit_code, 0) << made.err;
    EXPECT_EQ(generate(draft), plain) << flags.front();
  }
  // The draft is loaded (a missing one is an error naming it), not ignored.
  const RunResult missing = run_pagoda(
      {"generate", "--model", target, "--prompt", "hi", "--max-tokens", "2", "--speculative-config",
       "{\"model\": \"" + scratch.path("nowhere") + "\", \"num_speculative_tokens\": 2}"},
      scratch.dir());
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("nowhere"), std::string::npos) << missing.err;
}

// make-draft --mtp-acceptance rewrites the target in place: an --out beside it, a rate
// outside [0, 1] and a model without an MTP layer are refused, and the model is left as it was.
TEST(MakeDraftCli, MtpAcceptanceRefusesOutRatesOutsideZeroToOneAndModelsWithoutMtp) {
  const Scratch scratch;
  const std::string target = scratch.path("v3");
  ASSERT_EQ(
      run_pagoda({"make-model", "--preset", "tiny-deepseek-v3", "--out", target}, scratch.dir())
          .exit_code,
      0);
  const auto bytes = [&] {
    std::ifstream in(target + "/model.safetensors", std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string before = bytes();
  const RunResult with_out = run_pagoda({"make-draft", "--from", target, "--mtp-acceptance", "0.5",
                                         "--out", scratch.path("elsewhere")},
                                        scratch.dir());
  EXPECT_NE(with_out.exit_code, 0);
  EXPECT_NE(with_out.err.find("--out"), std::string::npos) << with_out.err;
  const RunResult above =
      run_pagoda({"make-draft", "--from", target, "--mtp-acceptance", "1.5"}, scratch.dir());
  EXPECT_NE(above.exit_code, 0);
  EXPECT_NE(above.err.find("--mtp-acceptance"), std::string::npos) << above.err;
  EXPECT_EQ(bytes(), before);

  const std::string dense = scratch.path("dense");
  ASSERT_EQ(run_pagoda({"make-model", "--preset", "tiny", "--out", dense}, scratch.dir()).exit_code,
            0);
  const RunResult no_mtp =
      run_pagoda({"make-draft", "--from", dense, "--mtp-acceptance", "0.5"}, scratch.dir());
  EXPECT_NE(no_mtp.exit_code, 0);
  EXPECT_NE(no_mtp.err.find("model.safetensors"), std::string::npos) << no_mtp.err;
}

}  // namespace
}  // namespace pagoda::cli::testing
