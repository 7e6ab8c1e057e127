// Speculative decoding (ngram) end to end: greedy outputs are those of plain decoding at batch 1
// and 32, with prefix-cache hits and under preemption, on the generated tiny model and on
// stories260K (whose greedy stories loop, so drafts must get accepted); sampled outputs stay
// within max_tokens and stop where asked; the counters add up.
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/test_paths.h"
#include "greedy_runs.h"
#include "pagoda/engine.h"
#include "pagoda/error.h"
#include "tiny_model.h"

namespace pagoda {
namespace {

using greedy_runs::greedy;
using greedy_runs::run;

constexpr const char* kNgram =
    R"({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4,
        "prompt_lookup_min": 1})";

EngineArgs tiny_engine(const std::string& speculative_config, uint64_t kv_bytes = 0) {
  EngineArgs args;
  args.model = test::tiny_model_dir();
  args.max_model_len = 256;
  args.max_num_seqs = 32;
  args.max_num_batched_tokens = 64;
  args.block_size = 4;
  args.kv_cache_space_bytes = kv_bytes;
  args.speculative_config = speculative_config;
  return args;
}

// 32 prompts; every other one a short random pattern repeated (so the lookup finds drafts), a
// third sharing a long prefix (so the prefix cache hits).
std::vector<std::vector<int32_t>> make_prompts() {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> token(3, 500);
  std::vector<int32_t> shared(24);
  for (int32_t& t : shared) t = token(rng);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 32; ++i) {
    std::vector<int32_t> p;
    if (i % 3 == 0) p = shared;
    std::vector<int32_t> pattern(2 + i % 5);
    for (int32_t& t : pattern) t = token(rng);
    const int repeats = i % 2 == 0 ? 6 : 1;
    for (int r = 0; r < repeats; ++r) p.insert(p.end(), pattern.begin(), pattern.end());
    prompts.push_back(p);
  }
  return prompts;
}

void expect_counters_add_up(const EngineStats& st) {
  EXPECT_LE(st.spec_num_accepted_tokens, st.spec_num_draft_tokens);
  EXPECT_LE(st.spec_num_drafts, st.spec_num_draft_tokens);
  int64_t per_pos = 0;
  for (size_t pos = 0; pos < st.spec_num_accepted_tokens_per_pos.size(); ++pos) {
    per_pos += st.spec_num_accepted_tokens_per_pos[pos];
    // A draft is only accepted after every draft before it.
    if (pos > 0) {
      EXPECT_LE(st.spec_num_accepted_tokens_per_pos[pos],
                st.spec_num_accepted_tokens_per_pos[pos - 1]);
    }
  }
  EXPECT_EQ(per_pos, st.spec_num_accepted_tokens);
}

// Requests asking for logprobs are drafted for too: each accepted draft's logprobs come from the
// verify row that checked it, the token after them from the last row. They must be plain
// decoding's, token for token (ids, ranks of the top list) and within float rounding (the
// log-sum-exp over the same logits bits), for ngram drafts and a draft model (the target itself,
// so every draft is accepted), with top-3 lists.
TEST(SpecDecode, LogprobRequestsAreDraftedForAndGetPlainDecodingsLogprobs) {
  const auto prompts = make_prompts();
  SamplingParams params = greedy(20);
  params.logprobs = 3;
  Engine plain(tiny_engine(""));
  const auto want = greedy_runs::run_outputs(plain, prompts, params);
  const std::string draft_model = std::string(R"({"method": "draft_model", "model": ")") +
                                  test::tiny_model_dir() + R"(", "num_speculative_tokens": 3})";
  for (const std::string& config : {std::string(kNgram), draft_model}) {
    Engine spec(tiny_engine(config));
    const auto got = greedy_runs::run_outputs(spec, prompts, params);
    const EngineStats st = spec.stats();
    EXPECT_GT(st.spec_num_accepted_tokens, 50) << config;
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [id, w] : want) {
      const CompletionOutput& g = got.at(id);
      ASSERT_EQ(g.token_ids, w.token_ids) << config << " request " << id;
      ASSERT_EQ(g.logprobs.size(), w.logprobs.size()) << config << " request " << id;
      for (size_t i = 0; i < w.logprobs.size(); ++i) {
        const GeneratedTokenLogprobs& a = g.logprobs[i];
        const GeneratedTokenLogprobs& b = w.logprobs[i];
        EXPECT_EQ(a.chosen.token_id, b.chosen.token_id);
        EXPECT_NEAR(a.chosen.logprob, b.chosen.logprob, 1e-5) << config << " request " << id;
        ASSERT_EQ(a.top.size(), 3u);
        ASSERT_EQ(a.top.size(), b.top.size());
        for (size_t t = 0; t < a.top.size(); ++t) {
          EXPECT_EQ(a.top[t].token_id, b.top[t].token_id) << config << " request " << id;
          EXPECT_NEAR(a.top[t].logprob, b.top[t].logprob, 1e-5) << config << " request " << id;
        }
      }
    }
  }
}

TEST(SpecDecode, TinyModelGreedyOutputsMatchPlainDecodingAtBatch32AndAlone) {
  const auto prompts = make_prompts();
  Engine plain(tiny_engine(""));
  const auto want = run(plain, prompts, greedy(24));
  Engine spec(tiny_engine(kNgram));
  const auto got = run(spec, prompts, greedy(24));
  EXPECT_EQ(got, want);
  const EngineStats st = spec.stats();
  EXPECT_GT(st.spec_num_drafts, 0);
  EXPECT_GT(st.prefix_cache_hits, 0);
  expect_counters_add_up(st);
  EXPECT_EQ(st.kv_cache_usage, 0.0) << "every block is free once all finished";
  // Batch 1: each request alone.
  for (size_t i : {0u, 1u, 6u}) {
    Engine alone(tiny_engine(kNgram));
    const auto one = run(alone, {prompts[i]}, greedy(24));
    EXPECT_EQ(one.at("0"), want.at(std::to_string(i))) << "request " << i;
  }
}

TEST(SpecDecode, TinyModelGreedyOutputsMatchUnderPreemption) {
  const auto prompts = make_prompts();
  Engine plain(tiny_engine(""));
  const auto want = run(plain, prompts, greedy(24));
  // 40 blocks of 4 tokens (512 B a token): a few requests at a time, drafts included.
  EngineArgs tight = tiny_engine(kNgram, 40 * 4 * 512);
  tight.max_model_len = 128;
  Engine spec(tight);
  const auto got = run(spec, prompts, greedy(24));
  EXPECT_GT(spec.stats().num_preemptions, 0);
  EXPECT_EQ(got, want);
}

TEST(SpecDecode, SampledOutputsKeepMaxTokensAndStopTokens) {
  const auto prompts = make_prompts();
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 20;
  p.seed = 3;
  p.max_tokens = 17;
  p.ignore_eos = true;
  Engine spec(tiny_engine(kNgram));
  const auto got = run(spec, prompts, p);
  ASSERT_EQ(got.size(), prompts.size());
  for (const auto& [id, ids] : got) EXPECT_EQ(ids.size(), 17u) << id;

  // A stop token id: the output ends with it, wherever in a step's accepted drafts it fell.
  const int32_t stop = got.at("0")[5];
  SamplingParams stopping = p;
  stopping.stop_token_ids = {stop};
  Engine again(tiny_engine(kNgram));
  const auto stopped = run(again, {prompts[0]}, stopping);
  const std::vector<int32_t>& ids = stopped.at("0");
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.back(), stop);
  for (size_t i = 0; i + 1 < ids.size(); ++i) EXPECT_NE(ids[i], stop);
}

// A stop string completed by an accepted draft ends the output there: the same tokens and text
// as plain decoding, nothing from the rest of the step. The repetitive prompts make the drafts
// hold, and stops cut at several places of each output.
TEST(SpecDecode, StopStringsEndTheOutputWhereTheyDoWithoutSpeculation) {
  const auto prompts = make_prompts();
  Engine plain(tiny_engine(""));
  Engine spec(tiny_engine(kNgram));
  const auto free_run = run(plain, prompts, greedy(32));
  std::vector<std::vector<int32_t>> stop_prompts;
  std::vector<SamplingParams> stop_params;
  for (size_t i = 0; i < prompts.size(); i += 2) {
    const std::string text = plain.decode(free_run.at(std::to_string(i)), true);
    if (text.size() < 8) continue;
    for (size_t cut : {text.size() / 3, text.size() / 2, text.size() - 4}) {
      SamplingParams p = greedy(32);
      p.stop = {text.substr(cut, 3)};
      stop_prompts.push_back(prompts[i]);
      stop_params.push_back(p);
    }
  }
  ASSERT_GT(stop_params.size(), 10u);
  const auto outputs = [&](Engine& engine) {
    std::vector<std::pair<std::string, std::vector<int32_t>>> result;
    for (size_t i = 0; i < stop_prompts.size(); ++i) {
      engine.add_request_tokens(std::to_string(i), stop_prompts[i], stop_params[i]);
    }
    std::map<std::string, CompletionOutput> finished;
    while (engine.has_unfinished_requests()) {
      for (const RequestOutput& out : engine.step()) {
        if (out.finished) finished[out.request_id] = out.outputs.front();
      }
    }
    for (const auto& [id, out] : finished) result.emplace_back(out.text, out.token_ids);
    return result;
  };
  EXPECT_EQ(outputs(spec), outputs(plain));
  EXPECT_GT(spec.stats().spec_num_accepted_tokens, 0);
}

// The grammar's logits processor sees only kept tokens: a drafted token the grammar forbids
// is rejected like any other, and every output still matches the pattern.
TEST(SpecDecode, StructuredOutputHoldsUnderSpeculation) {
  StructuredOutputsParams so;
  so.regex = "(ab|cd){3,9}-[0-9]{3}";
  const std::regex pattern("(ab|cd){3,9}-[0-9]{3}");
  const auto completions = [&](const std::string& spec, float temperature) {
    Engine engine(tiny_engine(spec));
    for (int i = 0; i < 6; ++i) {
      SamplingParams p;
      p.temperature = temperature;
      p.seed = 40 + i;
      p.max_tokens = 64;
      p.structured_outputs = so;
      engine.add_request(std::to_string(i), "abab cdcd abab", p);
    }
    std::map<std::string, std::string> texts;
    while (engine.has_unfinished_requests()) {
      for (const RequestOutput& out : engine.step()) {
        if (out.finished) texts[out.request_id] = out.outputs.front().text;
      }
    }
    EXPECT_GT(engine.stats().spec_num_drafts + (spec.empty() ? 1 : 0), 0);
    return texts;
  };
  for (const auto& [id, text] : completions(kNgram, 1.0f)) {
    EXPECT_TRUE(std::regex_match(text, pattern)) << id << ": " << text;
  }
  EXPECT_EQ(completions(kNgram, 0.0f), completions("", 0.0f));
}

TEST(SpecDecode, UnsupportedMethodsAndUnknownKeysAreOneClearError) {
  const auto message = [](const std::string& config) {
    try {
      Engine engine(tiny_engine(config));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(R"({"method": "eagle", "num_speculative_tokens": 1})")
                .find("\"eagle\" is not supported yet"),
            std::string::npos);
  // A Llama has no multi-token-prediction layers (spec_decode_mtp_test runs a DeepSeek-V3).
  EXPECT_NE(message(R"({"method": "mtp", "num_speculative_tokens": 1})")
                .find("multi-token-prediction layers"),
            std::string::npos);
  EXPECT_NE(message(R"({"method": "ngram", "num_speculative_tokens": 2, "lookahead": 3})")
                .find("unknown key \"lookahead\""),
            std::string::npos);
  EXPECT_NE(message(R"({"method": "ngram"})").find("num_speculative_tokens"), std::string::npos);
  EXPECT_NE(message(R"({"method": "nope", "num_speculative_tokens": 2})").find("unknown method"),
            std::string::npos);
}

// stories260K: a real (tiny) model whose greedy stories repeat themselves, so the lookup's
// drafts are accepted; the outputs must still be the plain ones, token for token.
TEST(SpecDecode, Stories260KAcceptsDraftsAndKeepsGreedyOutputs) {
  const auto dir = test::testdata_dir() / "models" / "stories260K-hf";
  if (!std::filesystem::exists(dir / "model.safetensors")) GTEST_SKIP() << "no " << dir;
  const auto args = [&](const std::string& spec) {
    EngineArgs a;
    a.model = dir.string();
    a.max_model_len = 512;
    a.max_num_seqs = 32;
    a.block_size = 4;  // the prompts share whole blocks: prefix-cache hits
    a.speculative_config = spec;
    return a;
  };
  Engine plain(args(""));
  const std::vector<std::string> texts = {"Once upon a time", "Lily and Ben went to the park",
                                          "The cat sat on the mat", "Tom had a red ball"};
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 32; ++i) prompts.push_back(plain.encode(texts[i % texts.size()], true));
  const auto want = run(plain, prompts, greedy(64));
  Engine spec(args(kNgram));
  EXPECT_EQ(run(spec, prompts, greedy(64)), want);
  // Again on the warm engine: the prompts now come from the prefix cache.
  EXPECT_EQ(run(spec, prompts, greedy(64)), want);
  const EngineStats st = spec.stats();
  EXPECT_GT(st.spec_num_accepted_tokens, 0);
  EXPECT_GT(st.prefix_cache_hits, 0);
  expect_counters_add_up(st);
  std::printf("[ stories260K ngram k=4 ] %lld drafts, %lld drafted tokens, %lld accepted\n",
              static_cast<long long>(st.spec_num_drafts),
              static_cast<long long>(st.spec_num_draft_tokens),
              static_cast<long long>(st.spec_num_accepted_tokens));
  Engine alone(args(kNgram));
  EXPECT_EQ(run(alone, {prompts[0]}, greedy(64)).at("0"), want.at("0"));
}

}  // namespace
}  // namespace pagoda
