// Speculative decoding with DeepSeek-V3's MTP layer (method "mtp") end to end on a generated
// tiny V3 (preset tiny-deepseek-v3: MLA, noaux_tc MoE, one MTP layer): greedy outputs are plain
// decoding's at batch 1 and 32, with one draft and with three (the layer run recursively), with
// prefix-cache hits and under preemption; sampled outputs keep max_tokens and stop tokens; a
// model without MTP layers and the ngram-only keys are one clear error. On random weights the
// layer's drafts are never accepted, so a second model is rewritten so that they always are
// (demo/mtp_predicting_model.h; the acceptance paths: several tokens a step, stops inside them).
// The MTP layer's logits themselves are checked against the PyTorch reference in
// tests/deepseek/check_deepseek.py.
#include <unistd.h>

#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include <gtest/gtest.h>

#include "demo/model_generator.h"
#include "demo/mtp_predicting_model.h"
#include "greedy_runs.h"
#include "pagoda/engine.h"
#include "pagoda/error.h"

namespace pagoda {
namespace {

using greedy_runs::greedy;
using greedy_runs::run;

// A generated model directory, removed when the process exits.
struct GeneratedDir {
  std::string dir;
  GeneratedDir(const std::string& name, int64_t num_mtp_layers, bool mtp_predicts = false,
               double acceptance = 1.0)
      : dir((std::filesystem::temp_directory_path() /
             ("pagoda_mtp_test_" + name + "_" + std::to_string(::getpid())))
                .string()) {
    ModelSpec spec = model_preset("tiny-deepseek-v3");
    spec.deepseek.num_nextn_predict_layers = num_mtp_layers;
    spec.seed = 5;
    generate_model(spec, dir);
    if (mtp_predicts) make_mtp_layer_predict_the_model(dir, acceptance, /*seed=*/3);
  }
  ~GeneratedDir() {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
};

const std::string& v3_dir() {
  static const GeneratedDir model("v3", 1);
  return model.dir;
}

std::string mtp(int k) {
  return R"({"method": "mtp", "num_speculative_tokens": )" + std::to_string(k) + "}";
}

const std::string& predicting_dir() {
  static const GeneratedDir model("predicting", 1, true);
  return model.dir;
}

EngineArgs v3_engine(const std::string& speculative_config, uint64_t kv_bytes = 0) {
  EngineArgs args;
  args.model = v3_dir();
  args.max_model_len = 256;
  args.max_num_seqs = 32;
  args.max_num_batched_tokens = 64;
  args.block_size = 4;
  args.kv_cache_space_bytes = kv_bytes;
  args.speculative_config = speculative_config;
  return args;
}

// 32 prompts of 5 to 40 tokens; every third starts with the same 24 tokens (prefix-cache hits).
std::vector<std::vector<int32_t>> make_prompts() {
  std::mt19937 rng(23);
  std::uniform_int_distribution<int32_t> token(3, 500);
  std::vector<int32_t> shared(24);
  for (int32_t& t : shared) t = token(rng);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 32; ++i) {
    std::vector<int32_t> p;
    if (i % 3 == 0) p = shared;
    p.resize(p.size() + 5 + static_cast<size_t>(i % 7) * 2);
    for (size_t j = i % 3 == 0 ? shared.size() : 0; j < p.size(); ++j) p[j] = token(rng);
    prompts.push_back(p);
  }
  return prompts;
}

TEST(SpecDecodeMtp, GreedyOutputsMatchPlainDecodingAtBatch32AndAlone) {
  const auto prompts = make_prompts();
  Engine plain(v3_engine(""));
  const auto want = run(plain, prompts, greedy(20));
  for (int k : {1, 3}) {
    Engine spec(v3_engine(mtp(k)));
    EXPECT_EQ(run(spec, prompts, greedy(20)), want) << "k = " << k;
    const EngineStats st = spec.stats();
    EXPECT_GT(st.spec_num_drafts, 0) << "k = " << k;
    EXPECT_GE(st.spec_num_draft_tokens, st.spec_num_drafts) << "k = " << k;
    EXPECT_LE(st.spec_num_accepted_tokens, st.spec_num_draft_tokens) << "k = " << k;
    EXPECT_GT(st.prefix_cache_hits, 0) << "k = " << k;
    EXPECT_EQ(st.kv_cache_usage, 0.0) << "every block is free once all finished";
    if (k == 3) {
      EXPECT_GT(st.spec_num_draft_tokens, st.spec_num_drafts) << "recursive drafts were made";
    }
  }
  for (size_t i : {0u, 1u, 5u}) {
    Engine alone(v3_engine(mtp(2)));
    EXPECT_EQ(run(alone, {prompts[i]}, greedy(20)).at("0"), want.at(std::to_string(i)))
        << "request " << i;
  }
}

TEST(SpecDecodeMtp, GreedyOutputsMatchUnderPreemption) {
  const auto prompts = make_prompts();
  Engine plain(v3_engine(""));
  const auto want = run(plain, prompts, greedy(20));
  // 40 blocks of 4 tokens in 3 cache layers (2 decoder + MTP) of 40 fp16 values: a few
  // requests at a time.
  EngineArgs tight = v3_engine(mtp(2), 40 * 4 * 3 * 40 * 2);
  tight.max_model_len = 128;
  Engine spec(tight);
  EXPECT_EQ(run(spec, prompts, greedy(20)), want);
  EXPECT_GT(spec.stats().num_preemptions, 0);
}

TEST(SpecDecodeMtp, SampledOutputsKeepMaxTokensAndStopTokens) {
  const auto prompts = make_prompts();
  SamplingParams p;
  p.temperature = 0.8f;
  p.seed = 3;
  p.max_tokens = 13;
  p.ignore_eos = true;
  Engine spec(v3_engine(mtp(3)));
  const auto got = run(spec, prompts, p);
  ASSERT_EQ(got.size(), prompts.size());
  for (const auto& [id, ids] : got) EXPECT_EQ(ids.size(), 13u) << id;

  const int32_t stop = got.at("0")[6];
  SamplingParams stopping = p;
  stopping.stop_token_ids = {stop};
  Engine again(v3_engine(mtp(3)));
  const std::vector<int32_t> ids = run(again, {prompts[0]}, stopping).at("0");
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.back(), stop);
  for (size_t i = 0; i + 1 < ids.size(); ++i) EXPECT_NE(ids[i], stop);
}

TEST(SpecDecodeMtp, DraftsOfALayerThatPredictsTheModelAreAcceptedAndChangeNothing) {
  const auto prompts = make_prompts();
  const auto engine_args = [](const std::string& spec) {
    EngineArgs args = v3_engine(spec);
    args.model = predicting_dir();
    return args;
  };
  Engine plain(engine_args(""));
  const auto want = run(plain, prompts, greedy(20));
  for (int k : {1, 3}) {
    Engine spec(engine_args(mtp(k)));
    EXPECT_EQ(run(spec, prompts, greedy(20)), want) << "k = " << k;
    const EngineStats st = spec.stats();
    ASSERT_GT(st.spec_num_draft_tokens, 0);
    EXPECT_GT(static_cast<double>(st.spec_num_accepted_tokens),
              0.9 * static_cast<double>(st.spec_num_draft_tokens))
        << "k = " << k;
    if (k == 3) {
      ASSERT_EQ(st.spec_num_accepted_tokens_per_pos.size(), 3u);
      EXPECT_GT(st.spec_num_accepted_tokens_per_pos[2], 0) << "whole recursive drafts accepted";
    }
  }
  // A stop token inside the accepted drafts ends the output there, as without speculation.
  SamplingParams stopping = greedy(20);
  stopping.ignore_eos = true;
  stopping.stop_token_ids = {want.at("4")[7]};
  Engine plain_stop(engine_args(""));
  Engine spec_stop(engine_args(mtp(3)));
  EXPECT_EQ(run(spec_stop, {prompts[4]}, stopping), run(plain_stop, {prompts[4]}, stopping));
}

// The engine counts the distinct routed experts each decode step's MoE layers ran: one token
// alone runs exactly its top_k (2 of tiny-deepseek-v3's 8), a verify step the union over its
// 1 + k tokens; the MTP layer's own pass is the proposer's, not counted.
TEST(SpecDecodeMtp, StepsCountTheUnionOfTheirTokensRoutedExperts) {
  const std::vector<std::vector<int32_t>> prompt = {make_prompts()[3]};
  Engine plain(v3_engine(""));
  run(plain, prompt, greedy(24));
  const ExpertStepStats decode = plain.stats().decode_experts;
  EXPECT_EQ(plain.stats().verify_experts.num_steps, 0);
  ASSERT_EQ(decode.num_steps, 23);  // the first token comes from the prefill step
  EXPECT_EQ(decode.num_tokens, 23);
  EXPECT_EQ(decode.num_moe_layers, 23);  // one MoE layer (the first is dense)
  EXPECT_EQ(decode.num_routed_experts, 2 * 23);

  Engine spec(v3_engine(mtp(3)));
  run(spec, prompt, greedy(24));
  const ExpertStepStats verify = spec.stats().verify_experts;
  ASSERT_GT(verify.num_steps, 0);
  EXPECT_EQ(verify.num_moe_layers, verify.num_steps);
  // Random weights accept nothing: 4 tokens a step but where max_tokens caps the drafts.
  EXPECT_GT(verify.num_tokens, 3 * verify.num_steps);
  EXPECT_LE(verify.num_tokens, 4 * verify.num_steps);
  // Between one token's 2 and all 8 experts; four random tokens almost never share both.
  EXPECT_GT(verify.experts_per_layer(), 2.5);
  EXPECT_LE(verify.experts_per_layer(), 8.0);
}

// A forced acceptance rate below 1: at 0 every token's head row is rotated away, so no draft
// is ever accepted; at 0.5 about half are; greedy outputs stay plain decoding's either way.
TEST(SpecDecodeMtp, ForcedAcceptanceRatesBelowOne) {
  const auto prompts = make_prompts();
  for (double acceptance : {0.0, 0.5}) {
    const GeneratedDir model("accept" + std::to_string(acceptance), 1, true, acceptance);
    EngineArgs args = v3_engine("");
    args.model = model.dir;
    Engine plain(args);
    const auto want = run(plain, prompts, greedy(20));
    args.speculative_config = mtp(2);
    Engine spec(args);
    EXPECT_EQ(run(spec, prompts, greedy(20)), want) << acceptance;
    const EngineStats st = spec.stats();
    ASSERT_GT(st.spec_num_draft_tokens, 0);
    if (acceptance == 0.0) {
      EXPECT_EQ(st.spec_num_accepted_tokens, 0);
      continue;
    }
    // The forced rate is that of each draft being right: the first drafts show it (a later
    // one counts only after its predecessors were accepted).
    ASSERT_FALSE(st.spec_num_accepted_tokens_per_pos.empty());
    const double first = static_cast<double>(st.spec_num_accepted_tokens_per_pos[0]) /
                         static_cast<double>(st.spec_num_drafts);
    EXPECT_NEAR(first, acceptance, 0.15) << st.spec_num_drafts << " drafts";
  }
}

TEST(SpecDecodeMtp, DeepseekMtpIsTheSameMethod) {
  const auto prompts = make_prompts();
  Engine a(v3_engine(mtp(2)));
  Engine b(v3_engine(R"({"method": "deepseek_mtp", "num_speculative_tokens": 2})"));
  EXPECT_EQ(run(a, {prompts[2]}, greedy(12)), run(b, {prompts[2]}, greedy(12)));
  EXPECT_GT(b.stats().spec_num_drafts, 0);
}

std::string error_of(const EngineArgs& args) {
  try {
    Engine engine(args);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(SpecDecodeMtp, ModelsWithoutMtpLayersAndNgramKeysAreOneClearError) {
  static const GeneratedDir no_mtp("nomtp", 0);
  EngineArgs args = v3_engine(mtp(1));
  args.model = no_mtp.dir;
  const std::string message = error_of(args);
  EXPECT_NE(message.find("needs multi-token-prediction layers"), std::string::npos) << message;
  EXPECT_NE(message.find("config.json"), std::string::npos) << message;

  const std::string lookup = error_of(v3_engine(R"({"method": "mtp", "num_speculative_tokens": 1,
                             "prompt_lookup_max": 3})"));
  EXPECT_NE(lookup.find("\"prompt_lookup_max\" applies to method \"ngram\""), std::string::npos)
      << lookup;
}

}  // namespace
}  // namespace pagoda
