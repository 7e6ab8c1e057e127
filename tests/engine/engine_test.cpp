// The engine end to end on a small random model: a request's greedy (or seeded) output must not
// depend on what else runs beside it, on prefix caching, chunked prefill or preemption; n > 1,
// stop strings, aborts and KV accounting behave as vLLM's do.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <omp.h>

#include "demo/model_generator.h"
#include "kernels/host_context.h"
#include "kernels/thread_placement.h"
#include "loader/safetensors.h"
#include "model/forward_batch.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/model_config.h"
#include "model/model_registry.h"
#include "pagoda/engine.h"
#include "tiny_model.h"
#include "util/error.h"

namespace pagoda {
namespace {

using test::tiny_model_dir;

EngineArgs small_engine(bool prefix_caching, bool chunked_prefill, uint64_t kv_bytes = 0) {
  EngineArgs args;
  args.model = tiny_model_dir();
  args.max_model_len = 512;
  args.max_num_seqs = 32;
  args.max_num_batched_tokens = chunked_prefill ? 48 : 512;  // small: prompts get chunked
  args.block_size = 4;
  args.kv_cache_space_bytes = kv_bytes;
  args.enable_prefix_caching = prefix_caching;
  args.enable_chunked_prefill = chunked_prefill;
  return args;
}

// 32 prompts of different lengths; a third share a long common prefix, so prefix caching hits.
std::vector<std::vector<int32_t>> make_prompts() {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> token(3, 500);
  std::vector<int32_t> shared(40);
  for (int32_t& t : shared) t = token(rng);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 32; ++i) {
    std::vector<int32_t> p;
    if (i % 3 == 0) p = shared;
    const int extra = 1 + static_cast<int>(rng() % 90);
    for (int j = 0; j < extra; ++j) p.push_back(token(rng));
    prompts.push_back(p);
  }
  return prompts;
}

SamplingParams params_for(int i) {
  SamplingParams p;
  p.max_tokens = 4 + i % 13;
  p.ignore_eos = true;
  if (i % 4 == 1) {  // some seeded random sampling: also independent of the batch
    p.temperature = 0.9f;
    p.top_p = 0.9f;
    p.seed = 1000 + i;
  } else {
    p.temperature = 0.0f;
  }
  return p;
}

std::vector<int32_t> run_alone(const EngineArgs& args, const std::vector<int32_t>& prompt,
                               const SamplingParams& params) {
  Engine engine(args);
  engine.add_request_tokens("alone", prompt, params);
  std::vector<int32_t> ids;
  while (engine.has_unfinished_requests()) {
    for (const RequestOutput& out : engine.step()) {
      if (out.finished) ids = out.outputs.front().token_ids;
    }
  }
  return ids;
}

std::map<std::string, std::vector<int32_t>> run_batch(
    Engine& engine, const std::vector<std::vector<int32_t>>& prompts) {
  for (size_t i = 0; i < prompts.size(); ++i) {
    engine.add_request_tokens(std::to_string(i), prompts[i], params_for(static_cast<int>(i)));
  }
  std::map<std::string, std::vector<int32_t>> outputs;
  while (engine.has_unfinished_requests()) {
    for (const RequestOutput& out : engine.step()) {
      if (out.finished) outputs[out.request_id] = out.outputs.front().token_ids;
    }
  }
  return outputs;
}

TEST(Engine, BatchOutputsEqualAloneOutputsAcrossCacheAndChunkingModes) {
  const auto prompts = make_prompts();
  std::vector<std::vector<int32_t>> alone;
  for (size_t i = 0; i < prompts.size(); ++i) {
    alone.push_back(
        run_alone(small_engine(false, false), prompts[i], params_for(static_cast<int>(i))));
    ASSERT_EQ(alone.back().size(), static_cast<size_t>(params_for(static_cast<int>(i)).max_tokens));
  }
  for (bool prefix : {true, false}) {
    for (bool chunked : {true, false}) {
      SCOPED_TRACE(testing::Message()
                   << "prefix caching " << prefix << ", chunked prefill " << chunked);
      Engine engine(small_engine(prefix, chunked));
      const auto batch = run_batch(engine, prompts);
      ASSERT_EQ(batch.size(), prompts.size());
      for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_EQ(batch.at(std::to_string(i)), alone[i]) << "request " << i;
      }
      EXPECT_EQ(engine.stats().kv_cache_usage, 0.0) << "every block is free once all finished";
      if (prefix) {
        EXPECT_GT(engine.stats().prefix_cache_hits, 0);
      }
    }
  }
}

// `--cpu-bind LIST` without `--threads` runs one kernel thread per listed CPU: OpenMP's default
// team (every CPU of the process) would put several threads on each CPU of a short list.
TEST(Engine, ACpuListSetsTheThreadCountToItsLength) {
  const std::vector<int> cpus = allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  int threads = 0;
  std::thread engine_thread([&] {
    EngineArgs args = small_engine(true, true);
    args.cpu_bind = std::to_string(cpus.front());
    Engine engine(args);
    threads = omp_get_max_threads();
  });
  engine_thread.join();
  EXPECT_EQ(threads, 1);
}

// Weights copied into huge pages and threads pinned by --cpu-bind change where things run,
// never what is computed. The pinned engine is built and stepped on a thread of its own, like
// the server's engine thread (and so the test's main thread stays unpinned).
TEST(Engine, HugePageWeightsAndPinnedThreadsGiveTheSameOutputs) {
  const auto prompts = make_prompts();
  EngineArgs mapped = small_engine(true, true);
  mapped.weights_memory = "mmap";
  Engine plain(mapped);
  const auto expected = run_batch(plain, prompts);
  std::map<std::string, std::vector<int32_t>> placed;
  std::thread engine_thread([&] {
    EngineArgs args = small_engine(true, true);
    args.weights_memory = "huge-pages";
    args.cpu_bind = "cores";
    Engine engine(args);
    placed = run_batch(engine, prompts);
  });
  engine_thread.join();
  EXPECT_EQ(placed, expected);

  EngineArgs bad = small_engine(true, true);
  bad.cpu_bind = "0-x";
  try {
    Engine engine(bad);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--cpu-bind '0-x'"), std::string::npos) << e.what();
  }
}

// A 16-bit KV cache (--kv-cache-dtype) halves the cache's bytes per token and keeps what the
// engine promises: a request's output does not depend on its batch, on prefix caching or on
// chunked prefill (each value is rounded once, when written, whichever step writes it).
TEST(Engine, SixteenBitKvCacheHalvesTheCacheAndKeepsBatchInvariance) {
  const auto prompts = make_prompts();
  EngineArgs fp32 = small_engine(false, false);
  fp32.kv_cache_dtype = "fp32";
  const int64_t fp32_bytes = Engine(fp32).stats().kv_cache_total_bytes;
  for (const char* dtype : {"fp16", "bf16"}) {
    SCOPED_TRACE(dtype);
    EngineArgs alone_args = small_engine(false, false);
    alone_args.kv_cache_dtype = dtype;
    std::vector<std::vector<int32_t>> alone;
    for (size_t i = 0; i < prompts.size(); i += 3) {
      alone.push_back(run_alone(alone_args, prompts[i], params_for(static_cast<int>(i))));
    }
    EngineArgs args = small_engine(true, true);
    args.kv_cache_dtype = dtype;
    Engine engine(args);
    // Sized by need (max_num_seqs full-length requests), so exactly half the fp32 pool.
    EXPECT_EQ(engine.stats().kv_cache_total_bytes * 2, fp32_bytes);
    const auto batch = run_batch(engine, prompts);
    for (size_t i = 0; i < prompts.size(); i += 3) {
      EXPECT_EQ(batch.at(std::to_string(i)), alone[i / 3]) << "request " << i;
    }
    EXPECT_GT(engine.stats().prefix_cache_hits, 0);
  }
  EngineArgs bad = small_engine(true, true);
  bad.kv_cache_dtype = "fp8";
  try {
    Engine engine(bad);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--kv-cache-dtype must be auto, fp32, fp16 or bf16, got "
                                         "'fp8'"),
              std::string::npos)
        << e.what();
  }
}

TEST(Engine, PreemptionUnderMemoryPressureKeepsOutputs) {
  const auto prompts = make_prompts();
  // A pool of 48 blocks of 4 tokens: far less than 32 requests need, so the scheduler preempts.
  Engine roomy(small_engine(true, true));
  const auto want = run_batch(roomy, prompts);
  const uint64_t block_bytes =
      4 * 512;  // tiny: 2 layers * 2 kv heads * 16 dims * (k+v) * 4 B = 512 B/token
  EngineArgs tight_args = small_engine(true, true, 48 * block_bytes);
  tight_args.max_model_len = 160;  // 40 blocks: one sequence fits, a few dozen do not
  Engine tight(tight_args);
  const auto got = run_batch(tight, prompts);
  EXPECT_GT(tight.stats().num_preemptions, 0);
  EXPECT_EQ(got, want);
}

// kv_cache_by_need (generate, chat, Python): no pool until the first step, then one that holds
// what the queued requests can use; the outputs are those of a pool reserved at start.
TEST(Engine, PoolSizedByNeedHoldsTheQueuedRequestsAndKeepsOutputs) {
  const auto prompts = make_prompts();
  Engine reserved(small_engine(true, true));
  const auto want = run_batch(reserved, prompts);

  EngineArgs args = small_engine(true, true);
  args.kv_cache_by_need = true;
  Engine by_need(args);
  EXPECT_EQ(by_need.cache_info().num_blocks, 0) << "nothing reserved before a request";
  int32_t blocks_needed = 0;  // prompt + max_tokens of each, in blocks of 4 tokens
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto tokens =
        static_cast<int32_t>(prompts[i].size()) + params_for(static_cast<int>(i)).max_tokens;
    blocks_needed += (tokens + 3) / 4;
  }
  EXPECT_EQ(run_batch(by_need, prompts), want);
  EXPECT_EQ(by_need.cache_info().num_blocks, blocks_needed);
  EXPECT_LT(by_need.cache_info().num_blocks, reserved.cache_info().num_blocks);
  EXPECT_EQ(by_need.stats().kv_cache_total_bytes, by_need.cache_info().num_bytes);
  EXPECT_EQ(by_need.cache_info().num_bytes, int64_t{blocks_needed} * 4 * 256)
      << "fp16: 256 B/token";
}

// A later request the pool cannot hold waits until none runs, then the pool grows (at least
// doubling); one the pool holds goes straight in.
TEST(Engine, PoolSizedByNeedGrowsForALongerRequestAndAbortsPendingOnes) {
  EngineArgs args = small_engine(true, true);
  args.kv_cache_by_need = true;
  Engine engine(args);
  SamplingParams p;
  p.temperature = 0.0f;
  p.ignore_eos = true;
  p.max_tokens = 4;
  const std::vector<int32_t> short_prompt(12, 7);  // 16 tokens: 4 blocks
  engine.add_request_tokens("short", short_prompt, p);
  engine.step();
  EXPECT_EQ(engine.cache_info().num_blocks, 4);
  while (engine.has_unfinished_requests()) engine.step();

  engine.add_request_tokens("again", short_prompt, p);  // fits: no new pool
  engine.add_request_tokens("aborted", std::vector<int32_t>(200, 9), p);
  engine.abort_request("aborted");
  std::map<std::string, std::string> finish;
  while (engine.has_unfinished_requests()) {
    for (const RequestOutput& out : engine.step()) {
      if (out.finished) finish[out.request_id] = out.outputs[0].finish_reason;
    }
  }
  EXPECT_EQ(finish["again"], "length");
  EXPECT_EQ(finish["aborted"], "abort");
  EXPECT_EQ(engine.cache_info().num_blocks, 4) << "an aborted request never sizes the pool";

  p.max_tokens = 20;
  const std::vector<int32_t> long_prompt(100, 5);  // 120 tokens: 30 blocks
  const std::vector<int32_t> want = run_alone(small_engine(false, false), long_prompt, p);
  engine.add_request_tokens("long", long_prompt, p);
  std::vector<int32_t> got;
  while (engine.has_unfinished_requests()) {
    for (const RequestOutput& out : engine.step()) {
      if (out.finished) got = out.outputs[0].token_ids;
    }
  }
  EXPECT_EQ(engine.cache_info().num_blocks, 30);
  EXPECT_EQ(got, want);
}

// RequestOutputKind: delta outputs add up to the cumulative ones, carry the prompt (and its
// logprobs) once and each sample's finish once; final-only gives one output, the last.
TEST(Engine, DeltaAndFinalOnlyOutputsAddUpToTheCumulativeOnes) {
  Engine engine(small_engine(true, true));
  SamplingParams p;
  p.n = 2;
  p.temperature = 0.8f;
  p.seed = 11;
  p.max_tokens = 9;
  p.ignore_eos = true;
  p.logprobs = 2;
  p.prompt_logprobs = 1;
  const std::vector<int32_t> prompt = make_prompts()[4];
  auto run = [&](RequestOutputKind kind) {
    SamplingParams q = p;
    q.output_kind = kind;
    engine.add_request_tokens("r", prompt, q);
    std::vector<RequestOutput> outs;
    while (engine.has_unfinished_requests()) {
      for (RequestOutput& out : engine.step()) outs.push_back(std::move(out));
    }
    return outs;
  };
  const std::vector<RequestOutput> cumulative = run(RequestOutputKind::kCumulative);
  const std::vector<RequestOutput> delta = run(RequestOutputKind::kDelta);
  const std::vector<RequestOutput> final_only = run(RequestOutputKind::kFinalOnly);
  ASSERT_FALSE(cumulative.empty());
  const RequestOutput& want = cumulative.back();
  ASSERT_TRUE(want.finished);
  ASSERT_EQ(want.prompt_logprobs.size(), prompt.size());

  ASSERT_EQ(final_only.size(), 1u);
  EXPECT_TRUE(final_only[0].finished);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(final_only[0].outputs[i].token_ids, want.outputs[i].token_ids);
    EXPECT_EQ(final_only[0].outputs[i].text, want.outputs[i].text);
  }

  ASSERT_EQ(delta.size(), cumulative.size());
  EXPECT_EQ(delta.front().prompt_token_ids, prompt);
  ASSERT_EQ(delta.front().prompt_logprobs.size(), prompt.size());
  for (size_t k = 1; k < prompt.size(); ++k) {
    EXPECT_EQ(delta.front().prompt_logprobs[k]->chosen.logprob,
              want.prompt_logprobs[k]->chosen.logprob);
  }
  EXPECT_TRUE(delta.back().finished);
  for (size_t i = 0; i < 2; ++i) {
    std::string text;
    std::vector<int32_t> ids;
    size_t num_logprobs = 0;
    int num_finishes = 0;
    for (size_t step = 0; step < delta.size(); ++step) {
      const CompletionOutput& d = delta[step].outputs[i];
      if (step > 0) {
        EXPECT_TRUE(delta[step].prompt_token_ids.empty());
        EXPECT_TRUE(delta[step].prompt_logprobs.empty());
      }
      EXPECT_EQ(d.text, d.delta_text);
      text += d.text;
      ids.insert(ids.end(), d.token_ids.begin(), d.token_ids.end());
      num_logprobs += d.logprobs.size();
      num_finishes += d.finished() ? 1 : 0;
    }
    EXPECT_EQ(text, want.outputs[i].text);
    EXPECT_EQ(ids, want.outputs[i].token_ids);
    EXPECT_EQ(num_logprobs, want.outputs[i].logprobs.size());
    EXPECT_EQ(num_finishes, 1);
  }
}

TEST(Engine, NSamplesShareThePromptAndGreedySamplesAgree) {
  Engine engine(small_engine(true, true));
  SamplingParams p;
  p.n = 3;
  p.temperature = 0.0f;
  p.max_tokens = 6;
  p.ignore_eos = true;
  const std::vector<int32_t> prompt = make_prompts()[5];
  engine.add_request_tokens("r", prompt, p);
  RequestOutput last;
  while (engine.has_unfinished_requests()) {
    for (RequestOutput& out : engine.step()) last = out;
  }
  ASSERT_TRUE(last.finished);
  ASSERT_EQ(last.outputs.size(), 3u);
  const auto alone = run_alone(small_engine(false, false), prompt, [] {
    SamplingParams q;
    q.temperature = 0.0f;
    q.max_tokens = 6;
    q.ignore_eos = true;
    return q;
  }());
  for (const CompletionOutput& o : last.outputs) EXPECT_EQ(o.token_ids, alone);
}

TEST(Engine, StopStringEndsTheOutputBeforeIt) {
  Engine engine(small_engine(true, true));
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 12;
  p.ignore_eos = true;
  const auto free_run = engine.generate({"Once upon a time"}, {p});
  const std::string text = free_run[0].outputs[0].text;
  ASSERT_GE(text.size(), 4u);
  // Stop on a piece from the middle of the free-running text.
  const size_t cut = text.size() / 2;
  p.stop = {text.substr(cut, 2)};
  const size_t first = text.find(p.stop[0]);
  const auto stopped = engine.generate({"Once upon a time"}, {p});
  EXPECT_EQ(stopped[0].outputs[0].finish_reason, "stop");
  EXPECT_EQ(stopped[0].outputs[0].stop_reason, p.stop[0]);
  EXPECT_EQ(stopped[0].outputs[0].text, text.substr(0, first));
}

// Whether `sequence` occurs contiguously in `ids`.
bool contains_run(const std::vector<int32_t>& ids, const std::vector<int32_t>& sequence) {
  return !sequence.empty() &&
         std::search(ids.begin(), ids.end(), sequence.begin(), sequence.end()) != ids.end();
}

TEST(Engine, LogitBiasForcesATokenAndAllowedTokenIdsRestrictTheOutput) {
  Engine engine(small_engine(true, true));
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 8;
  p.ignore_eos = true;
  const std::vector<int32_t> free_run =
      engine.generate({"Once upon a time"}, {p})[0].outputs[0].token_ids;
  // A token the free run never picks, pushed to the top by the largest bias OpenAI allows.
  int32_t forced = 300;
  while (std::find(free_run.begin(), free_run.end(), forced) != free_run.end()) ++forced;
  p.logit_bias = {{forced, 100.0f}};
  EXPECT_EQ(engine.generate({"Once upon a time"}, {p})[0].outputs[0].token_ids,
            std::vector<int32_t>(8, forced));

  // Random sampling over the whole vocabulary, restricted to three tokens.
  p.logit_bias.clear();
  p.temperature = 1.0f;
  p.seed = 5;
  p.max_tokens = 24;
  p.allowed_token_ids = {{17, 250, 401}};
  const std::vector<int32_t> ids =
      engine.generate({"Once upon a time"}, {p})[0].outputs[0].token_ids;
  ASSERT_EQ(ids.size(), 24u);
  for (int32_t id : ids) EXPECT_TRUE(id == 17 || id == 250 || id == 401) << id;
}

TEST(Engine, BadWordsNeverAppearInTheOutput) {
  Engine engine(small_engine(true, true));
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 12;
  p.ignore_eos = true;
  const std::vector<int32_t> free_run =
      engine.generate({"Once upon a time"}, {p})[0].outputs[0].token_ids;
  ASSERT_GE(free_run.size(), 2u);
  // Bad words cut from what the model says freely: its first token as a word, and its second
  // and third tokens as one word of (usually) two tokens.
  for (const std::vector<int32_t>& cut :
       {std::vector<int32_t>(free_run.begin(), free_run.begin() + 1),
        std::vector<int32_t>(free_run.begin() + 1, free_run.begin() + 3)}) {
    const std::string word = engine.decode(cut, false);
    if (word.find_first_not_of(" ") == std::string::npos) continue;
    p.bad_words = {word};
    const std::vector<int32_t> ids =
        engine.generate({"Once upon a time"}, {p})[0].outputs[0].token_ids;
    EXPECT_EQ(ids.size(), 12u);
    const size_t start = word.find_first_not_of(" ");
    const std::string stripped = word.substr(start);
    for (const std::string& form : {stripped, " " + stripped}) {
      const std::vector<int32_t> tokens = engine.encode(form, false);
      EXPECT_FALSE(contains_run(ids, tokens)) << "'" << form << "' in the output";
    }
    if (contains_run(free_run, engine.encode(stripped, false)) ||
        contains_run(free_run, engine.encode(" " + stripped, false))) {
      EXPECT_NE(ids, free_run);
    }
  }
}

TEST(Engine, OutOfVocabularyLogitBiasAndAllowedIdsAreRejected) {
  Engine engine(small_engine(true, true));
  SamplingParams p;
  p.max_tokens = 4;
  p.logit_bias = {{1 << 24, 1.0f}};
  try {
    engine.add_request_tokens("x", {1, 2, 3}, p);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("logit_bias"), std::string::npos) << e.what();
  }
  p.logit_bias.clear();
  p.allowed_token_ids = {{3, 1 << 24}};
  try {
    engine.add_request_tokens("y", {1, 2, 3}, p);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("allowed_token_ids"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(engine.has_unfinished_requests());
}

TEST(Engine, AbortFreesBlocksImmediately) {
  Engine engine(small_engine(true, true));
  SamplingParams p;
  p.max_tokens = 200;
  p.ignore_eos = true;
  engine.add_request_tokens("a", make_prompts()[0], p);
  engine.add_request_tokens("b", make_prompts()[1], p);
  for (int i = 0; i < 5; ++i) engine.step();
  EXPECT_GT(engine.stats().kv_cache_usage, 0.0);
  engine.abort_request("a");
  engine.abort_request("b");
  EXPECT_FALSE(engine.has_unfinished_requests());
  EXPECT_EQ(engine.stats().kv_cache_usage, 0.0);
  EXPECT_EQ(engine.stats().num_running, 0);
}

// The counters the stats line and vllm:iteration_tokens_total read: prompt tokens are counted
// as the model computes them (chunk by chunk, prefix-cache hits excluded), every step's tokens,
// and the pool as cache_info() describes it.
TEST(Engine, StatsCountComputedPromptTokensAndSteps) {
  Engine engine(small_engine(true, true));  // 48-token steps: a 100-token prompt takes 3
  SamplingParams p;
  p.max_tokens = 4;
  p.ignore_eos = true;
  const std::vector<int32_t> prompt(100, 7);
  engine.add_request_tokens("a", prompt, p);
  EXPECT_EQ(engine.stats().prompt_tokens, 100);
  EXPECT_EQ(engine.stats().prompt_tokens_computed, 0);
  engine.step();
  EXPECT_EQ(engine.stats().prompt_tokens_computed, 48);
  EXPECT_EQ(engine.stats().num_steps, 1);
  EXPECT_EQ(engine.stats().last_step_num_tokens, 48);
  while (engine.has_unfinished_requests()) engine.step();
  EXPECT_EQ(engine.stats().prompt_tokens_computed, 100);
  EXPECT_EQ(engine.stats().num_steps, 3 + 3);  // three prefill chunks, then three decodes
  EXPECT_EQ(engine.stats().last_step_num_tokens, 1);
  // The same prompt again: its whole blocks come from the prefix cache, not the model.
  engine.add_request_tokens("b", prompt, p);
  while (engine.has_unfinished_requests()) engine.step();
  EXPECT_LT(engine.stats().prompt_tokens_computed, 200);
  const CacheInfo cache = engine.cache_info();
  EXPECT_EQ(cache.block_size, 4);
  EXPECT_GT(cache.num_blocks, 0);
  EXPECT_EQ(cache.num_bytes, engine.stats().kv_cache_total_bytes);
  EXPECT_TRUE(cache.enable_prefix_caching);
}

TEST(Engine, RejectsPromptsThatDoNotFitAndBadParameters) {
  Engine engine(small_engine(true, true));
  SamplingParams p;
  p.max_tokens = 100;
  std::vector<int32_t> long_prompt(500, 7);
  try {
    engine.add_request_tokens("x", long_prompt, p);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("88 tokens over"), std::string::npos) << e.what();
  }
  p.max_tokens = 4;
  p.top_p = 1.5f;
  EXPECT_THROW(engine.add_request_tokens("y", {1, 2, 3}, p), Error);
  p.top_p = 1.0f;
  EXPECT_THROW(engine.add_request_tokens("z", {1, 99999}, p), Error);
  EXPECT_FALSE(engine.has_unfinished_requests());
}

TEST(Engine, GreedyLogprobsReportTheChosenTokenAsTheMostLikely) {
  Engine engine(small_engine(true, true));
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 5;
  p.ignore_eos = true;
  p.logprobs = 3;
  const auto out = engine.generate({"Once upon a time"}, {p});
  const CompletionOutput& o = out[0].outputs[0];
  ASSERT_EQ(o.logprobs.size(), o.token_ids.size());
  for (size_t i = 0; i < o.logprobs.size(); ++i) {
    const GeneratedTokenLogprobs& lp = o.logprobs[i];
    EXPECT_EQ(lp.chosen.token_id, o.token_ids[i]);
    ASSERT_EQ(lp.top.size(), 3u);
    EXPECT_EQ(lp.top[0].token_id, lp.chosen.token_id);  // greedy picks the most likely
    EXPECT_FLOAT_EQ(lp.top[0].logprob, lp.chosen.logprob);
    EXPECT_GE(lp.top[0].logprob, lp.top[1].logprob);
    EXPECT_LE(lp.chosen.logprob, 0.0f);
  }
}

// The reference for prompt logprobs: the model alone, one forward per prefix [0, p) through the
// plain last-row path, then log_softmax in double. ref[p] is the distribution of token p.
std::vector<std::vector<double>> reference_prompt_logprobs(const std::vector<int32_t>& prompt) {
  const std::string dir = tiny_model_dir();
  const ModelConfig config = ModelConfig::from_dir(dir);
  const TensorStore store = TensorStore::open(dir);
  std::unique_ptr<Model> model =
      create_model(host_execution_context(), config, store, ModelOptions{});
  constexpr int32_t kBlockSize = 4;
  const auto num_blocks = static_cast<int32_t>((prompt.size() + kBlockSize - 1) / kBlockSize);
  std::vector<float> memory(static_cast<size_t>(
      KvCache::bytes_needed(model->kv_cache_spec(), num_blocks, kBlockSize) / 4));
  KvCache cache(model->kv_cache_spec(), num_blocks, kBlockSize, memory.data());
  std::vector<int32_t> block_table(static_cast<size_t>(num_blocks));
  for (int32_t b = 0; b < num_blocks; ++b) block_table[static_cast<size_t>(b)] = num_blocks - 1 - b;

  const int64_t vocab = model->vocab_size();
  std::vector<std::vector<double>> ref(prompt.size());
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (size_t length = 1; length < prompt.size(); ++length) {
    ForwardBatch batch;
    for (size_t p = 0; p < length; ++p) {
      const auto position = static_cast<int32_t>(p);
      batch.token_ids.push_back(prompt[p]);
      batch.positions.push_back(position);
      batch.slot_mapping.push_back(
          int64_t{block_table[static_cast<size_t>(position / kBlockSize)]} * kBlockSize +
          position % kBlockSize);
    }
    ForwardSequence fs;
    fs.num_tokens = static_cast<int32_t>(length);
    fs.context_len = static_cast<int32_t>(length);
    fs.block_table = block_table.data();
    fs.needs_logits = true;
    batch.sequences.push_back(fs);
    model->forward(host_execution_context(), batch, cache, logits.data());
    double max_logit = -INFINITY;
    for (float l : logits) max_logit = std::max(max_logit, static_cast<double>(l));
    double sum = 0;
    for (float l : logits) sum += std::exp(static_cast<double>(l) - max_logit);
    std::vector<double>& row = ref[length];
    for (float l : logits) row.push_back(static_cast<double>(l) - max_logit - std::log(sum));
  }
  return ref;
}

TEST(Engine, PromptLogprobsMatchAFullForwardAcrossChunksBatchAndCachedPrefix) {
  const std::vector<int32_t> prompt = make_prompts()[0];  // 40 shared tokens + its own: chunked
  ASSERT_GT(prompt.size(), 48u) << "the prompt must span several prefill chunks";
  const auto ref = reference_prompt_logprobs(prompt);

  // fp32 KV: the reference is a plain fp32 forward, and what is checked here is chunking,
  // batching and the prefix cache (a 16-bit cache's rounding is SixteenBitKvCache's concern).
  EngineArgs args = small_engine(true, true);
  args.kv_cache_dtype = "fp32";
  Engine engine(args);
  SamplingParams plain;
  plain.temperature = 0.0f;
  plain.max_tokens = 3;
  plain.ignore_eos = true;
  // The same prompt first, so its blocks are in the prefix cache; the request with prompt
  // logprobs must not take them (a cached prefix has no logits).
  engine.add_request_tokens("warm", prompt, plain);
  std::vector<int32_t> plain_output;
  while (engine.has_unfinished_requests()) {
    for (const RequestOutput& out : engine.step()) {
      if (out.finished) plain_output = out.outputs[0].token_ids;
    }
  }
  SamplingParams with = plain;
  with.n = 2;
  with.prompt_logprobs = 3;
  with.logprobs = 1;
  engine.add_request_tokens("logprobs", prompt, with);
  engine.add_request_tokens("beside", make_prompts()[3], plain);  // batched with it
  SamplingParams single = with;
  single.n = 1;
  engine.add_request_tokens("single", prompt, single);
  RequestOutput first, last, single_last;
  bool seen_first = false;
  while (engine.has_unfinished_requests()) {
    for (const RequestOutput& out : engine.step()) {
      if (out.request_id == "single") single_last = out;
      if (out.request_id != "logprobs") continue;
      if (!seen_first) first = out;
      seen_first = true;
      last = out;
    }
  }
  ASSERT_TRUE(last.finished);
  ASSERT_TRUE(single_last.finished);
  // (With n = 2 the second sample's forked prompt counts as cached, so ask the n = 1 request.)
  EXPECT_EQ(single_last.num_cached_tokens, 0);
  EXPECT_EQ(single_last.outputs[0].token_ids, plain_output);
  // ...although the prefix cache holds the prompt: a plain request takes it.
  engine.add_request_tokens("again", prompt, plain);
  int32_t again_cached = 0;
  while (engine.has_unfinished_requests()) {
    for (const RequestOutput& out : engine.step()) again_cached = out.num_cached_tokens;
  }
  EXPECT_GT(again_cached, 0);
  for (const CompletionOutput& o : last.outputs) EXPECT_EQ(o.token_ids, plain_output);
  // Complete from the first output on, and the same in the last.
  ASSERT_EQ(first.prompt_logprobs.size(), prompt.size());
  ASSERT_EQ(last.prompt_logprobs.size(), prompt.size());
  EXPECT_FALSE(last.prompt_logprobs[0].has_value()) << "nothing precedes the first token";

  constexpr double kTolerance = 1e-4;  // the same fp32 model, rows batched differently
  for (size_t p = 1; p < prompt.size(); ++p) {
    SCOPED_TRACE(testing::Message() << "prompt position " << p);
    ASSERT_TRUE(first.prompt_logprobs[p].has_value());
    ASSERT_TRUE(last.prompt_logprobs[p].has_value());
    const GeneratedTokenLogprobs& lp = *last.prompt_logprobs[p];
    ASSERT_TRUE(single_last.prompt_logprobs.at(p).has_value());
    EXPECT_NEAR(single_last.prompt_logprobs[p]->chosen.logprob, lp.chosen.logprob, kTolerance);
    const std::vector<double>& want = ref[p];
    EXPECT_EQ(lp.chosen.token_id, prompt[p]);
    EXPECT_NEAR(lp.chosen.logprob, want[static_cast<size_t>(prompt[p])], kTolerance);
    EXPECT_FLOAT_EQ(first.prompt_logprobs[p]->chosen.logprob, lp.chosen.logprob);
    const double target = want[static_cast<size_t>(prompt[p])];
    const auto above =
        std::count_if(want.begin(), want.end(), [&](double v) { return v > target + kTolerance; });
    const auto not_below =
        std::count_if(want.begin(), want.end(), [&](double v) { return v >= target - kTolerance; });
    EXPECT_GE(lp.chosen.rank, above + 1);
    EXPECT_LE(lp.chosen.rank, not_below);
    // The 3 most likely tokens, best first, with their own logprobs.
    std::vector<double> sorted = want;
    std::sort(sorted.rbegin(), sorted.rend());
    ASSERT_EQ(lp.top.size(), 3u);
    for (size_t t = 0; t < lp.top.size(); ++t) {
      EXPECT_EQ(lp.top[t].rank, static_cast<int32_t>(t) + 1);
      EXPECT_NEAR(lp.top[t].logprob, want[static_cast<size_t>(lp.top[t].token_id)], kTolerance);
      EXPECT_NEAR(lp.top[t].logprob, sorted[t], kTolerance);
    }
  }
}

TEST(Engine, PromptLogprobsOutOfRangeAreRejected) {
  Engine engine(small_engine(true, true));
  SamplingParams p;
  p.prompt_logprobs = 21;
  EXPECT_THROW(engine.add_request_tokens("x", {1, 2, 3}, p), Error);
  p.prompt_logprobs = -1;
  EXPECT_THROW(engine.add_request_tokens("y", {1, 2, 3}, p), Error);
  EXPECT_FALSE(engine.has_unfinished_requests());
}

TEST(Engine, UnknownArchitectureIsAOneLineErrorNamingTheFile) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(tiny_model_dir()).string() + "_unknown_arch";
  fs::create_directories(dir);
  for (const auto& entry : fs::directory_iterator(tiny_model_dir())) {
    fs::copy(entry.path(), dir / entry.path().filename(), fs::copy_options::overwrite_existing);
  }
  {
    std::ifstream in(dir / "config.json");
    std::stringstream text;
    text << in.rdbuf();
    std::string config = text.str();
    const std::string from = "LlamaForCausalLM";
    config.replace(config.find(from), from.size(), "MambaForCausalLM");
    std::ofstream(dir / "config.json") << config;
  }
  EngineArgs args = small_engine(true, true);
  args.model = dir.string();
  try {
    Engine engine(args);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("config.json"), std::string::npos) << message;
    EXPECT_NE(message.find("unsupported architecture 'MambaForCausalLM'"), std::string::npos)
        << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pagoda
