// `pagoda generate -pp P` and `-tp T -pp P`: rank 0 starts the other ranks, each stage holds its
// layers, and the greedy tokens are those of one process, for Llama, Qwen2 and DeepSeek V2/V3
// (5 layers, so that the split is uneven) and the real stories260K; with prefix-cache hits,
// chunked prefill and preemption in the same run, with one batch in flight per stage. Ranks are
// oversubscribed on a 2-core machine.
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "cli/cli_process.h"
#include "common/test_paths.h"
#include "common/tiny_specs.h"
#include "demo/model_generator.h"
#include "model/pipeline_parallel.h"
#include "parallel_cli.h"
#include "util/error.h"

namespace pagoda {
namespace {

using namespace cli::testing;  // tests/cli/cli_process.h, parallel_cli.h
namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Hand-computed from vLLM's get_pp_indices: L / P layers each, the remainder one each to the
// stages just before the last.
TEST(PipelineStageLayers, SplitsAsVllm) {
  auto sizes = [](int64_t layers, int stages) {
    std::vector<int64_t> out;
    int64_t next = 0;
    for (int s = 0; s < stages; ++s) {
      const LayerRange r = pipeline_stage_layers(layers, stages, s);
      EXPECT_EQ(r.begin, next) << "stages must be contiguous";
      next = r.end;
      out.push_back(r.size());
    }
    EXPECT_EQ(next, layers);
    return out;
  };
  EXPECT_EQ(sizes(4, 2), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(sizes(5, 2), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(sizes(7, 4), (std::vector<int64_t>{2, 2, 2, 1}));
  EXPECT_EQ(sizes(4, 3), (std::vector<int64_t>{1, 2, 1}));
  EXPECT_EQ(sizes(32, 3), (std::vector<int64_t>{11, 11, 10}));
  EXPECT_EQ(sizes(5, 1), (std::vector<int64_t>{5}));
  EXPECT_THROW(pipeline_stage_layers(2, 3, 0), Error);
  EXPECT_THROW(pipeline_stage_layers(4, 2, 2), Error);
}

// The tests' tiny sizes (common/tiny_specs.h) at 5 layers and 2 KV heads.
std::string tiny_model(const Scratch& scratch, const std::string& architecture) {
  ModelSpec spec = test::tiny_spec(architecture);
  spec.num_layers = 5;
  spec.num_kv_heads = 2;
  spec.max_position_embeddings = 4096;
  spec.seed = 23;
  return generate_in(scratch, spec);
}

struct GreedyRun {
  std::vector<std::vector<int32_t>> tokens;  // per prompt
  std::string err;
  int max_batches_in_flight = 0;  // what rank 0's summary reports with -pp > 1
};

// "at most N of P batches in flight" from the communication summary; 0 when absent.
int batches_in_flight(const std::string& err) {
  const size_t at = err.find("at most ");
  if (at == std::string::npos || err.find("batches in flight", at) == std::string::npos) return 0;
  return std::stoi(err.substr(at + 8));
}

// Greedy generation of `prompts` at -tp tp -pp pp (plus `extra` flags).
GreedyRun greedy(const Scratch& scratch, const std::string& model, int tp, int pp,
                 const std::vector<std::string>& prompts, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"generate",        "--model", model, "--temperature",    "0",
                                   "--ignore-eos",    "--json",  "-tp", std::to_string(tp), "-pp",
                                   std::to_string(pp)};
  for (const std::string& p : prompts) args.insert(args.end(), {"--prompt", p});
  args.insert(args.end(), extra.begin(), extra.end());
  const auto r = run_pagoda(args, scratch.dir(), {}, 600s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  GreedyRun run;
  run.err = r.err;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);)
    run.tokens.push_back(nlohmann::json::parse(line).at("token_ids").get<std::vector<int32_t>>());
  EXPECT_EQ(run.tokens.size(), prompts.size()) << r.out;
  if (pp > 1) {
    EXPECT_NE(
        r.err.find("pipeline parallel (" + std::to_string(pp) + " stages x " + std::to_string(tp)),
        std::string::npos)
        << "no communication summary: " << r.err;
    run.max_batches_in_flight = batches_in_flight(r.err);
    EXPECT_NE(r.err.find(" of " + std::to_string(pp) + " batches in flight"), std::string::npos)
        << r.err;
  }
  return run;
}

const std::vector<std::string> kPrompts = {"Once upon", "a time 7"};

void expect_same_tokens(const Scratch& scratch, const std::string& model,
                        const std::vector<std::pair<int, int>>& tp_pp,
                        const std::vector<std::string>& extra = {"--max-tokens", "16"}) {
  const GreedyRun want = greedy(scratch, model, 1, 1, kPrompts, extra);
  for (const auto& [tp, pp] : tp_pp) {
    EXPECT_EQ(greedy(scratch, model, tp, pp, kPrompts, extra).tokens, want.tokens)
        << "-tp " << tp << " -pp " << pp;
  }
}

TEST(PipelineParallelGenerate, LlamaMatchesOneProcess) {
  if (!have_pagoda()) GTEST_SKIP() << "no pagoda binary";
  Scratch scratch;
  expect_same_tokens(scratch, tiny_model(scratch, "LlamaForCausalLM"), {{1, 2}, {1, 3}, {2, 2}});
}

TEST(PipelineParallelGenerate, Qwen2MatchesOneProcess) {
  if (!have_pagoda()) GTEST_SKIP() << "no pagoda binary";
  Scratch scratch;
  expect_same_tokens(scratch, tiny_model(scratch, "Qwen2ForCausalLM"), {{1, 2}, {2, 2}});
}

TEST(PipelineParallelGenerate, Stories260KMatchesOneProcess) {
  if (!have_pagoda()) GTEST_SKIP() << "no pagoda binary";
  const fs::path model = test::testdata_dir() / "models" / "stories260K-hf";
  if (!fs::exists(model / "config.json")) GTEST_SKIP() << "no " << model << " (../shared/testdata)";
  Scratch scratch;
  expect_same_tokens(scratch, model.string(), {{1, 2}, {2, 2}});
}

// One run with everything the scheduler does besides plain steps: prompts that share a prefix
// (prefix-cache hits), a token budget smaller than a prompt (chunked prefill) and a KV pool of
// 6 blocks for 3 requests that need 3 each (preemption and recomputation).
TEST(PipelineParallelGenerate, PrefixCacheChunkedPrefillAndPreemptionMatchOneProcess) {
  if (!have_pagoda()) GTEST_SKIP() << "no pagoda binary";
  Scratch scratch;
  const std::string model = tiny_model(scratch, "LlamaForCausalLM");
  const std::string shared(40, 'a');  // 40+ tokens: two full blocks shared by every prompt
  const std::vector<std::string> prompts = {shared + " one", shared + " two", shared + " three"};
  // The pool rank 0 plans is sized for the fullest stage's layers and its KV heads.
  auto flags = [](int tp, int pp) {
    int64_t fullest = 0;
    for (int s = 0; s < pp; ++s)
      fullest = std::max(fullest, pipeline_stage_layers(5, pp, s).size());
    const int64_t bytes_per_token = fullest * (2 / tp) * 32 * 2 * 2;  // K and V, fp16
    return std::vector<std::string>{"--max-tokens",
                                    "48",
                                    "--max-model-len",
                                    "112",
                                    "--block-size",
                                    "16",
                                    "--kv-cache-space",
                                    std::to_string(8 * 16 * bytes_per_token),
                                    "--enable-prefix-caching",
                                    "--enable-chunked-prefill",
                                    "--max-num-batched-tokens",
                                    "24"};
  };
  // Against the same tensor-parallel size on one stage: a stage boundary passes h in fp32 and
  // changes no arithmetic, so even this long degenerate run (where a tensor-parallel sum order
  // can flip a near tie against one process) must match token for token.
  for (const int tp : {1, 2}) {
    const GreedyRun want = greedy(scratch, model, tp, 1, prompts, flags(tp, 1));
    EXPECT_NE(want.err.find("preemptions:"), std::string::npos) << want.err;
    const GreedyRun got = greedy(scratch, model, tp, 2, prompts, flags(tp, 2));
    EXPECT_EQ(got.tokens, want.tokens) << "-tp " << tp << " -pp 2";
    EXPECT_EQ(got.err.find("(0 from the prefix cache)"), std::string::npos) << got.err;
    EXPECT_NE(got.err.find("preemptions:"), std::string::npos) << got.err;
    // The three requests ran as two batches in flight at once.
    EXPECT_EQ(got.max_batches_in_flight, 2) << got.err;
  }
}

// Eight prompts at once: rank 0 keeps one batch per stage in flight (each of an even share of
// the requests, none in two batches at once), and the tokens are still one process's.
TEST(PipelineParallelGenerate, BatchesOverlapAcrossStagesAndMatchOneProcess) {
  if (!have_pagoda()) GTEST_SKIP() << "no pagoda binary";
  Scratch scratch;
  const std::string model = tiny_model(scratch, "LlamaForCausalLM");
  std::vector<std::string> prompts;
  for (int i = 0; i < 8; ++i) prompts.push_back("story " + std::to_string(i * 7) + " begins");
  const std::vector<std::string> extra = {"--max-tokens", "12"};
  const GreedyRun want = greedy(scratch, model, 1, 1, prompts, extra);
  for (const auto& [tp, pp] : std::vector<std::pair<int, int>>{{1, 2}, {1, 3}, {2, 2}}) {
    const GreedyRun got = greedy(scratch, model, tp, pp, prompts, extra);
    EXPECT_EQ(got.tokens, want.tokens) << "-tp " << tp << " -pp " << pp;
    EXPECT_EQ(got.max_batches_in_flight, pp) << "-tp " << tp << " -pp " << pp << "\n" << got.err;
  }
}

TEST(PipelineParallelGenerate, TooManyStagesAreRefused) {
  if (!have_pagoda()) GTEST_SKIP() << "no pagoda binary";
  Scratch scratch;
  const auto r = run_pagoda({"generate", "--model", tiny_model(scratch, "LlamaForCausalLM"),
                             "--prompt", "hi", "-pp", "6"},
                            scratch.dir(), {}, 120s);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("5 layers do not fill 6 stages"), std::string::npos) << r.err;
}

// The tests' tiny DeepSeek (common/tiny_specs.h) at 5 layers: two dense layers
// (first_k_dense_replace), then three MoE layers of 8 experts (2 per token) and one shared
// expert of 128 rows (V3 also an MTP layer in its files): -pp 2 splits them 3 + 2 (dense, dense,
// MoE | MoE, MoE), -pp 3 2 + 2 + 1 (dense, dense | MoE, MoE | MoE), so h crosses after a dense
// layer and after a MoE layer.
std::string tiny_deepseek(const Scratch& scratch, const std::string& architecture) {
  ModelSpec spec = test::tiny_deepseek_spec(architecture);
  spec.num_layers = 5;
  spec.max_position_embeddings = 4096;
  spec.seed = 29;
  DeepseekSpec& d = spec.deepseek;
  d.first_k_dense_replace = 2;
  d.n_shared_experts = 1;
  d.moe_intermediate_size = 128;
  if (architecture == "DeepseekV3ForCausalLM") d.num_nextn_predict_layers = 1;
  return generate_in(scratch, spec);
}

TEST(PipelineParallelGenerate, DeepSeekV2MatchesOneProcess) {
  if (!have_pagoda()) GTEST_SKIP() << "no pagoda binary";
  Scratch scratch;
  expect_same_tokens(scratch, tiny_deepseek(scratch, "DeepseekV2ForCausalLM"),
                     {{1, 2}, {1, 3}, {2, 2}});
}

TEST(PipelineParallelGenerate, DeepSeekV3MatchesOneProcess) {
  if (!have_pagoda()) GTEST_SKIP() << "no pagoda binary";
  Scratch scratch;
  expect_same_tokens(scratch, tiny_deepseek(scratch, "DeepseekV3ForCausalLM"), {{1, 2}, {2, 2}});
}

// The MTP layer drafts from the last layer's h: speculation under a pipeline is refused before
// loading, with the reason.
TEST(PipelineParallelGenerate, DeepSeekMtpSpeculationIsRefused) {
  if (!have_pagoda()) GTEST_SKIP() << "no pagoda binary";
  Scratch scratch;
  const auto r = run_pagoda(
      {"generate", "--model", tiny_deepseek(scratch, "DeepseekV3ForCausalLM"), "--prompt", "hi",
       "-pp", "2", "--speculative-config", R"({"method": "mtp", "num_speculative_tokens": 1})"},
      scratch.dir(), {}, 120s);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--speculative-config cannot be combined with"), std::string::npos) << r.err;
}

// `pagoda serve -pp 2` on DeepSeek-V2: two concurrent completions (batched in one step through
// both stages) answered as one process generates them; SIGTERM drains and exits 0, and the
// stage-1 rank leaves with it.
TEST(PipelineParallelServe, DeepSeekServesAsOneProcessAndStopsCleanly) {
  if (!have_pagoda()) GTEST_SKIP() << "no pagoda binary";
  Scratch scratch;
  const std::string model = tiny_deepseek(scratch, "DeepseekV2ForCausalLM");
  const std::vector<std::string> prompts = {"Once upon", "a time 7"};
  std::vector<std::string> want;
  for (const std::string& prompt : prompts) {
    const auto one = run_pagoda({"generate", "--model", model, "--prompt", prompt, "--max-tokens",
                                 "12", "--temperature", "0", "--ignore-eos", "--json"},
                                scratch.dir());
    ASSERT_EQ(one.exit_code, 0) << one.err;
    want.push_back(nlohmann::json::parse(one.out).at("text").get<std::string>());
  }

  PagodaProcess p(
      {"serve", model, "--host", "127.0.0.1", "--port", "0", "-pp", "2", "--log-level", "info"},
      scratch.dir());
  const int port = wait_until_serving(p, 120s);
  ASSERT_NE(port, 0) << p.err();
  ASSERT_NE(want[0], want[1]) << "prompts that do not tell batch rows apart";
  ASSERT_EQ(processes_with({model, "serve"}).size(), 2u) << "not rank 0 and one stage-1 rank";
  std::vector<std::string> got(prompts.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < prompts.size(); ++i) {
    clients.emplace_back([&, i] {
      httplib::Client client("127.0.0.1", port);
      client.set_read_timeout(120, 0);
      const nlohmann::json body = {{"model", model},
                                   {"prompt", prompts[i]},
                                   {"max_tokens", 12},
                                   {"temperature", 0},
                                   {"ignore_eos", true}};
      const auto r = client.Post("/v1/completions", body.dump(), "application/json");
      ASSERT_TRUE(r);
      ASSERT_EQ(r->status, 200) << r->body;
      got[i] = nlohmann::json::parse(r->body).at("choices").at(0).at("text").get<std::string>();
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(got, want) << p.err();

  p.send_signal(SIGTERM);
  EXPECT_EQ(p.wait_exit(60s), 0) << p.err();
  EXPECT_TRUE(p.wait_until(
      [&] {
        return processes_with({model, "serve"}).empty();
      },
      30s))
      << "a stage rank outlived the server";
}

// The last stage's second tensor rank killed mid-generation: the ranks waiting on it (its
// stage's tensor group, the link from the first stage) notice, and so in turn does rank 0, which
// fails the run soon instead of hanging.
TEST(PipelineParallelGenerate, KilledLastStageRankFailsTheRunWithoutHanging) {
  if (!have_pagoda()) GTEST_SKIP() << "no pagoda binary";
  Scratch scratch;
  const std::string model = tiny_model(scratch, "LlamaForCausalLM");
  PagodaProcess p(
      {"generate", "--model", model, "--prompt", "Once upon", "--max-tokens", "4000",
       "--ignore-eos", "--temperature", "0", "-tp", "2", "-pp", "2", "--log-level", "info"},
      scratch.dir());
  ASSERT_TRUE(kill_rank_while_generating(p, model, 3));
  const auto start = Clock::now();
  const int code = p.wait_exit(90s);
  EXPECT_NE(code, 0) << p.err();
  EXPECT_NE(code, -1) << "generate hung after a rank died:\n" << p.err();
  EXPECT_LT(Clock::now() - start, 60s);
  // The communicator names the dead pid (and its rank within the group that noticed).
  const std::string err = p.err();
  EXPECT_TRUE(err.find("exited during") != std::string::npos ||
              err.find("died") != std::string::npos)
      << err;
}

}  // namespace
}  // namespace pagoda
