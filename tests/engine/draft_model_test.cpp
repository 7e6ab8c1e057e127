// Speculative decoding with a draft model end to end, on the generated tiny model: greedy
// outputs are plain decoding's at batch 1 and 32, with prefix-cache hits and under preemption,
// for drafts that agree with the target (the target itself: every draft accepted) and drafts
// that often do not (its first layer with noise, `pagoda make-draft`'s derivation); sampled
// drafts from the target itself are all accepted; a draft of another vocabulary is one error.
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include <gtest/gtest.h>

#include "common/test_paths.h"
#include "demo/draft_derivation.h"
#include "demo/model_generator.h"
#include "greedy_runs.h"
#include "pagoda/engine.h"
#include "pagoda/error.h"
#include "tiny_model.h"

namespace pagoda {
namespace {

using greedy_runs::greedy;
using greedy_runs::run;

namespace fs = std::filesystem;

std::string draft_config(const std::string& model, int k = 4) {
  return "{\"method\": \"draft_model\", \"model\": \"" + model +
         "\", \"num_speculative_tokens\": " + std::to_string(k) + "}";
}

// A scratch directory removed with the fixture.
struct ScratchDir {
  fs::path path;
  explicit ScratchDir(const std::string& name)
      : path(fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()))) {}
  ~ScratchDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

// The tiny model's first layer with noise: cheap, and disagrees with the target often.
const std::string& noisy_draft_dir() {
  static const ScratchDir dir("pagoda_draft_noisy");
  static const bool written = [] {
    DraftDerivation d;
    d.from = test::tiny_model_dir();
    d.out = dir.path.string();
    d.num_layers = 1;
    d.noise = 0.3;
    d.seed = 5;
    derive_draft_model(d);
    return true;
  }();
  (void)written;
  static const std::string path = dir.path.string();
  return path;
}

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

// 32 random prompts, a third sharing a long prefix (so the prefix cache hits).
std::vector<std::vector<int32_t>> make_prompts() {
  std::mt19937 rng(17);
  std::uniform_int_distribution<int32_t> token(3, 500);
  std::vector<int32_t> shared(24);
  for (int32_t& t : shared) t = token(rng);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 32; ++i) {
    std::vector<int32_t> p;
    if (i % 3 == 0) p = shared;
    p.resize(p.size() + 3 + static_cast<size_t>(i % 7));
    for (size_t j = p.size() - 3 - static_cast<size_t>(i % 7); j < p.size(); ++j) p[j] = token(rng);
    prompts.push_back(p);
  }
  return prompts;
}

void print_acceptance(const char* what, const EngineStats& st) {
  std::printf("[ %s ] %lld drafts, %lld drafted tokens, %lld accepted\n", what,
              static_cast<long long>(st.spec_num_drafts),
              static_cast<long long>(st.spec_num_draft_tokens),
              static_cast<long long>(st.spec_num_accepted_tokens));
}

TEST(DraftModel, TheTargetAsItsOwnDraftAcceptsEveryDraftAndKeepsGreedyOutputs) {
  const auto prompts = make_prompts();
  Engine plain(tiny_engine(""));
  const auto want = run(plain, prompts, greedy(24));
  Engine spec(tiny_engine(draft_config(test::tiny_model_dir())));
  EXPECT_EQ(run(spec, prompts, greedy(24)), want);
  // Again on the warm engine: the prompts come from the prefix cache, whose blocks must hold
  // the draft's KV as well as the target's.
  EXPECT_EQ(run(spec, prompts, greedy(24)), want);
  const EngineStats st = spec.stats();
  print_acceptance("tiny, self draft, k=4", st);
  EXPECT_GT(st.prefix_cache_hits, 0);
  EXPECT_GT(st.spec_num_drafts, 0);
  EXPECT_EQ(st.spec_num_accepted_tokens, st.spec_num_draft_tokens);
  // Every position of every draft was accepted.
  ASSERT_EQ(st.spec_num_accepted_tokens_per_pos.size(), 4u);
  int64_t per_pos = 0;
  for (int64_t n : st.spec_num_accepted_tokens_per_pos) per_pos += n;
  EXPECT_EQ(per_pos, st.spec_num_accepted_tokens);
  EXPECT_EQ(st.kv_cache_usage, 0.0) << "every block is free once all finished";
  // Batch 1: each request alone.
  for (size_t i : {0u, 1u, 6u}) {
    Engine alone(tiny_engine(draft_config(test::tiny_model_dir())));
    EXPECT_EQ(run(alone, {prompts[i]}, greedy(24)).at("0"), want.at(std::to_string(i)))
        << "request " << i;
    EXPECT_EQ(alone.stats().spec_num_accepted_tokens, alone.stats().spec_num_draft_tokens);
  }
}

// Quantized weights: an int8 (and int4) target with its exact copy (`pagoda make-draft`) as
// the draft. The draft decodes one token per forward and the target verifies five, so every
// drafted token is accepted and the output is plain greedy decoding's only if a token's logits
// do not depend on how many tokens the forward computed (matmul rows, attention tiles against
// one-token attention), bit for bit. A bf16 model big enough for the SIMD paths (512 wide,
// 1408-wide MLP, 4096 tokens), random prompts: near ties are common.
TEST(DraftModel, QuantizedTargetsCopyAcceptsEveryDraftAndKeepsGreedyOutputs) {
  const ScratchDir target("pagoda_draft_quant_target"), copy("pagoda_draft_quant_copy");
  ModelSpec spec = model_preset("tiny");
  spec.hidden_size = 512;
  spec.intermediate_size = 1408;
  spec.num_heads = 8;
  spec.num_kv_heads = 4;
  spec.vocab_size = 4096;
  spec.max_position_embeddings = 1024;
  spec.dtype = DType::kBF16;
  generate_model(spec, target.path.string());
  DraftDerivation d;
  d.from = target.path.string();
  d.out = copy.path.string();
  derive_draft_model(d);
  const auto prompts = make_prompts();
  for (const char* quantization : {"int8", "int4"}) {
    EngineArgs args = tiny_engine("");
    args.model = target.path.string();
    args.quantization = quantization;
    Engine plain(args);
    const auto want = run(plain, prompts, greedy(24));
    args.speculative_config = draft_config(copy.path.string());
    Engine spec_engine(args);
    EXPECT_EQ(run(spec_engine, prompts, greedy(24)), want) << quantization;
    const EngineStats st = spec_engine.stats();
    print_acceptance(quantization, st);
    EXPECT_GT(st.spec_num_drafts, 0) << quantization;
    EXPECT_EQ(st.spec_num_accepted_tokens, st.spec_num_draft_tokens) << quantization;
  }
}

TEST(DraftModel, ANoisyDraftKeepsGreedyOutputsAtBatch32AloneAndUnderPreemption) {
  const auto prompts = make_prompts();
  Engine plain(tiny_engine(""));
  const auto want = run(plain, prompts, greedy(24));
  Engine spec(tiny_engine(draft_config(noisy_draft_dir(), 3)));
  EXPECT_EQ(run(spec, prompts, greedy(24)), want);
  EXPECT_EQ(run(spec, prompts, greedy(24)), want);
  const EngineStats st = spec.stats();
  print_acceptance("tiny, first layer + noise 0.3, k=3", st);
  EXPECT_GT(st.prefix_cache_hits, 0);
  // Rejections happen (the point of this draft), and so do acceptances.
  EXPECT_GT(st.spec_num_accepted_tokens, 0);
  EXPECT_LT(st.spec_num_accepted_tokens, st.spec_num_draft_tokens);
  for (size_t i : {0u, 5u}) {
    Engine alone(tiny_engine(draft_config(noisy_draft_dir(), 3)));
    EXPECT_EQ(run(alone, {prompts[i]}, greedy(24)).at("0"), want.at(std::to_string(i)));
  }
  // 40 blocks of 4 tokens: 512 B a token for the target, 256 for the one-layer draft.
  EngineArgs tight = tiny_engine(draft_config(noisy_draft_dir(), 3), 40 * 4 * (512 + 256));
  tight.max_model_len = 128;
  Engine preempting(tight);
  EXPECT_EQ(run(preempting, prompts, greedy(24)), want);
  EXPECT_GT(preempting.stats().num_preemptions, 0);
  EXPECT_GT(preempting.stats().spec_num_accepted_tokens, 0);
}

// n > 1: the samples fork the prompt's blocks, and the one holding the prompt's last tokens is
// copied for each (copy-on-write). The draft's cache must get the same copy (Proposer::
// copy_block), or the target as its own draft would draft from stale KV and be rejected.
TEST(DraftModel, ForkedSamplesCopyTheDraftsBlocksToo) {
  const auto prompts = make_prompts();
  Engine plain(tiny_engine(""));
  SamplingParams p = greedy(12);
  p.n = 3;
  Engine spec(tiny_engine(draft_config(test::tiny_model_dir(), 3)));
  for (size_t i : {1u, 3u, 4u}) {  // prompt lengths 4, 30 and 7: last blocks full and partial
    const auto want = run(plain, {prompts[i]}, greedy(12)).at("0");
    spec.add_request_tokens("r", prompts[i], p);
    RequestOutput last;
    while (spec.has_unfinished_requests()) {
      for (RequestOutput& out : spec.step()) last = out;
    }
    ASSERT_EQ(last.outputs.size(), 3u);
    for (const CompletionOutput& o : last.outputs) EXPECT_EQ(o.token_ids, want) << "prompt " << i;
  }
  const EngineStats st = spec.stats();
  EXPECT_GT(st.spec_num_drafts, 0);
  EXPECT_EQ(st.spec_num_accepted_tokens, st.spec_num_draft_tokens);
}

// Sampled drafts: the draft draws from its softmax(logits / T) and hands that distribution to
// the rejection sampler. Drawn from the target itself, q equals p (no truncation or penalties
// here), so min(1, p/q) = 1: every draft is accepted. With top-k the target's p differs from q
// and drafts get rejected, yet outputs keep max_tokens.
TEST(DraftModel, SampledDraftsFromTheTargetItselfAreAllAccepted) {
  const auto prompts = make_prompts();
  SamplingParams p;
  p.temperature = 0.8f;
  p.seed = 3;
  p.max_tokens = 17;
  p.ignore_eos = true;
  Engine spec(tiny_engine(draft_config(test::tiny_model_dir())));
  const auto got = run(spec, prompts, p);
  ASSERT_EQ(got.size(), prompts.size());
  for (const auto& [id, ids] : got) EXPECT_EQ(ids.size(), 17u) << id;
  const EngineStats st = spec.stats();
  EXPECT_GT(st.spec_num_drafts, 0);
  // q and p are computed in float by two code paths; a draw landing where they differ in the
  // last bits may be rejected, so allow a handful.
  EXPECT_GE(st.spec_num_accepted_tokens * 1000, st.spec_num_draft_tokens * 995);

  p.top_k = 5;
  Engine truncated(tiny_engine(draft_config(test::tiny_model_dir())));
  const auto top_k = run(truncated, prompts, p);
  for (const auto& [id, ids] : top_k) EXPECT_EQ(ids.size(), 17u) << id;
  EXPECT_LT(truncated.stats().spec_num_accepted_tokens, truncated.stats().spec_num_draft_tokens);
}

std::string error_of(const std::string& speculative_config) {
  try {
    Engine engine(tiny_engine(speculative_config));
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(DraftModel, ADraftOfAnotherVocabularyIsOneErrorNamingTheFile) {
  const ScratchDir other("pagoda_draft_vocab");
  ModelSpec spec = model_preset("tiny");
  spec.vocab_size = 640;
  generate_model(spec, other.path.string());
  const std::string message = error_of(draft_config(other.path.string()));
  EXPECT_NE(message.find("vocab_size 640"), std::string::npos) << message;
  EXPECT_NE(message.find((other.path / "config.json").string()), std::string::npos) << message;

  // The same size, another tokenizer (stories260K's 512 tokens).
  const auto stories = test::testdata_dir() / "models" / "stories260K-hf";
  if (!fs::exists(stories / "tokenizer.json")) GTEST_SKIP() << "no " << stories;
  const ScratchDir renamed("pagoda_draft_tokens");
  spec = model_preset("tiny");
  spec.tokenizer_from = stories.string();
  generate_model(spec, renamed.path.string());
  const std::string tokens = error_of(draft_config(renamed.path.string()));
  EXPECT_NE(tokens.find("in its tokenizer"), std::string::npos) << tokens;
  EXPECT_NE(tokens.find((renamed.path / "tokenizer.json").string()), std::string::npos) << tokens;
}

TEST(DraftModel, ConfigWithoutMethodIsADraftModelAndAMissingModelIsAnError) {
  // vLLM: "model" without "method" means draft_model.
  const std::string implied =
      "{\"model\": \"" + test::tiny_model_dir() + "\", \"num_speculative_tokens\": 2}";
  Engine engine(tiny_engine(implied));
  EXPECT_EQ(run(engine, {{5, 6, 7, 8}}, greedy(8)).at("0").size(), 8u);
  EXPECT_GT(engine.stats().spec_num_drafts, 0);
  EXPECT_NE(error_of(R"({"method": "draft_model", "num_speculative_tokens": 2})")
                .find("\"model\" (the draft model's path) is required"),
            std::string::npos);
  EXPECT_NE(error_of(draft_config(test::tiny_model_dir()).insert(1, "\"prompt_lookup_max\": 3, "))
                .find("\"prompt_lookup_max\" applies to method \"ngram\""),
            std::string::npos);
}

}  // namespace
}  // namespace pagoda
