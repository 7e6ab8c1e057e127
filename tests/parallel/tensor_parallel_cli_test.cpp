// `pagoda generate -tp N` (and chat, bench): rank 0 starts its follower ranks (copies of itself)
// and the greedy tokens are those of one process, for Llama and Qwen2 in bf16, int8 and GGUF Q8_0,
// and for the real stories260K; a follower killed mid-generation makes generate fail with the
// reason, soon, instead of hanging. Ranks are oversubscribed on this 2-core machine.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "cli/cli_process.h"
#include "common/test_paths.h"
#include "common/tiny_specs.h"
#include "demo/model_generator.h"
#include "parallel_cli.h"

namespace pagoda {
namespace {

using namespace cli::testing;  // tests/cli/cli_process.h, parallel_cli.h
namespace fs = std::filesystem;
using namespace std::chrono_literals;

// The tests' tiny sizes (common/tiny_specs.h) at 2 layers and 4 KV heads.
std::string tiny_model(const Scratch& scratch, const std::string& architecture) {
  ModelSpec spec = test::tiny_spec(architecture);
  spec.num_layers = 2;
  spec.num_kv_heads = 4;
  spec.max_position_embeddings = 4096;
  spec.seed = 11;
  return generate_in(scratch, spec);
}

// The generated token ids of every prompt, in order (generate --json, one line per output).
std::vector<std::vector<int32_t>> greedy_tokens(const Scratch& scratch, const std::string& model,
                                                int tp, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {
      "generate", "--model",      model,          "--prompt", "Once upon",
      "--prompt", "a time 7",     "--max-tokens", "16",       "--temperature",
      "0",        "--ignore-eos", "--json",       "-tp",      std::to_string(tp)};
  args.insert(args.end(), extra.begin(), extra.end());
  const auto r = run_pagoda(args, scratch.dir(), {}, 300s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::vector<int32_t>> tokens;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    tokens.push_back(nlohmann::json::parse(line).at("token_ids").get<std::vector<int32_t>>());
  }
  EXPECT_EQ(tokens.size(), 2u) << r.out;
  if (tp > 1) {
    EXPECT_NE(r.err.find("tensor parallel (" + std::to_string(tp)), std::string::npos)
        << "no communication summary: " << r.err;
  }
  return tokens;
}

void expect_same_tokens(const Scratch& scratch, const std::string& model, std::vector<int> sizes,
                        const std::vector<std::string>& extra = {}) {
  const auto want = greedy_tokens(scratch, model, 1, extra);
  for (int tp : sizes) EXPECT_EQ(greedy_tokens(scratch, model, tp, extra), want) << "-tp " << tp;
}

TEST(TensorParallelGenerate, LlamaBf16MatchesOneProcess) {
  if (!have_pagoda()) GTEST_SKIP() << "no pagoda binary";
  Scratch scratch;
  expect_same_tokens(scratch, tiny_model(scratch, "LlamaForCausalLM"), {2, 4});
}

TEST(TensorParallelGenerate, Qwen2Bf16MatchesOneProcess) {
  if (!have_pagoda()) GTEST_SKIP() << "no pagoda binary";
  Scratch scratch;
  expect_same_tokens(scratch, tiny_model(scratch, "Qwen2ForCausalLM"), {2, 4});
}

TEST(TensorParallelGenerate, Int8AtLoadMatchesOneProcess) {
  if (!have_pagoda()) GTEST_SKIP() << "no pagoda binary";
  Scratch scratch;
  // Groups of 32: every shard's activations are quantized in the same blocks as one process's.
  expect_same_tokens(scratch, tiny_model(scratch, "LlamaForCausalLM"), {2},
                     {"--quantization", "int8", "--quantization-group-size", "32"});
}

TEST(TensorParallelGenerate, GgufQ8_0MatchesOneProcess) {
  if (!have_pagoda()) GTEST_SKIP() << "no pagoda binary";
  Scratch scratch;
  const std::string gguf = scratch.path("model.q8_0.gguf");
  const auto r = run_pagoda({"export-gguf", "--model", tiny_model(scratch, "LlamaForCausalLM"),
                             "--type", "q8_0", "--out", gguf},
                            scratch.dir());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_same_tokens(scratch, gguf, {2});
}

TEST(TensorParallelGenerate, Stories260KMatchesOneProcess) {
  if (!have_pagoda()) GTEST_SKIP() << "no pagoda binary";
  const fs::path model = test::testdata_dir() / "models" / "stories260K-hf";
  if (!fs::exists(model / "config.json")) GTEST_SKIP() << "no " << model << " (../shared/testdata)";
  Scratch scratch;
  expect_same_tokens(scratch, model.string(), {2, 4});
}

// The tests' tiny DeepSeek (common/tiny_specs.h): a dense first layer, then two MoE layers
// of 8 experts (2 per token), here with one shared expert of 128 rows in V2 too.
std::string tiny_deepseek(const Scratch& scratch, const std::string& architecture) {
  ModelSpec spec = test::tiny_deepseek_spec(architecture);
  spec.max_position_embeddings = 4096;
  spec.seed = 13;
  spec.deepseek.n_shared_experts = 1;
  spec.deepseek.moe_intermediate_size = 128;
  return generate_in(scratch, spec);
}

TEST(TensorParallelGenerate, DeepSeekV2MatchesOneProcess) {
  if (!have_pagoda()) GTEST_SKIP() << "no pagoda binary";
  Scratch scratch;
  expect_same_tokens(scratch, tiny_deepseek(scratch, "DeepseekV2ForCausalLM"), {2});
}

TEST(TensorParallelGenerate, DeepSeekV3MatchesOneProcess) {
  if (!have_pagoda()) GTEST_SKIP() << "no pagoda binary";
  Scratch scratch;
  expect_same_tokens(scratch, tiny_deepseek(scratch, "DeepseekV3ForCausalLM"), {2, 4});
}

// `pagoda chat -tp 2`: the same answer as one process.
TEST(TensorParallelChat, AnswersAsOneProcess) {
  if (!have_pagoda()) GTEST_SKIP() << "no pagoda binary";
  Scratch scratch;
  const std::string model = tiny_model(scratch, "LlamaForCausalLM");
  std::vector<std::string> answers;
  for (const char* tp : {"1", "2"}) {
    PagodaProcess p(
        {"chat", "--model", model, "--temperature", "0", "--max-tokens", "12", "-tp", tp},
        scratch.dir());
    p.write_stdin("hello there\n");
    p.close_stdin();
    ASSERT_EQ(p.wait_exit(120s), 0) << p.err();
    answers.push_back(p.out());
  }
  EXPECT_FALSE(answers[0].empty());
  EXPECT_EQ(answers[1], answers[0]);
}

// `pagoda bench latency/throughput -tp 2` run the ranks and report what they communicated.
TEST(TensorParallelBench, LatencyAndThroughputReportCommunication) {
  if (!have_pagoda()) GTEST_SKIP() << "no pagoda binary";
  Scratch scratch;
  const std::string model = tiny_model(scratch, "LlamaForCausalLM");
  const auto latency =
      run_pagoda({"bench", "latency", "--model", model, "--input-len", "16", "--output-len", "8",
                  "--batch-size", "2", "--num-iters", "1", "--json", "-tp", "2"},
                 scratch.dir(), {}, 120s);
  ASSERT_EQ(latency.exit_code, 0) << latency.err;
  EXPECT_GT(nlohmann::json::parse(latency.out).at("tg_tokens_per_s").get<double>(), 0.0);
  EXPECT_NE(latency.err.find("tensor parallel (2 ranks) communication: decode"), std::string::npos)
      << latency.err;
  const auto throughput = run_pagoda({"bench", "throughput", "--model", model, "--num-prompts", "4",
                                      "--input-len", "16", "--output-len", "8", "-tp", "2"},
                                     scratch.dir(), {}, 120s);
  ASSERT_EQ(throughput.exit_code, 0) << throughput.err;
  EXPECT_NE(throughput.out.find("Throughput:"), std::string::npos) << throughput.out;
  EXPECT_NE(throughput.err.find("tensor parallel (2 ranks) communication"), std::string::npos)
      << throughput.err;
}

TEST(TensorParallelGenerate, KilledFollowerFailsTheRunWithoutHanging) {
  if (!have_pagoda()) GTEST_SKIP() << "no pagoda binary";
  Scratch scratch;
  const std::string model = tiny_model(scratch, "LlamaForCausalLM");
  PagodaProcess p({"generate", "--model", model, "--prompt", "Once upon", "--max-tokens", "4000",
                   "--ignore-eos", "--temperature", "0", "-tp", "2", "--log-level", "info"},
                  scratch.dir());
  // Once rank 0 generates (its engine is up), rank 1 killed.
  ASSERT_TRUE(kill_rank_while_generating(p, model, 1));
  const auto start = Clock::now();
  const int code = p.wait_exit(60s);
  EXPECT_NE(code, 0) << p.err();
  EXPECT_NE(code, -1) << "generate hung after its follower died:\n" << p.err();
  EXPECT_LT(Clock::now() - start, 30s);
  EXPECT_NE(p.err().find("rank 1"), std::string::npos) << p.err();
}

// `pagoda serve -tp 2`: a completion as one process generates it; then a follower killed: the
// next completion is refused with the reason and the server exits non-zero, never hangs.
TEST(TensorParallelServe, ServesThenExitsWhenAFollowerDies) {
  if (!have_pagoda()) GTEST_SKIP() << "no pagoda binary";
  Scratch scratch;
  const std::string model = tiny_model(scratch, "LlamaForCausalLM");
  const auto one = run_pagoda({"generate", "--model", model, "--prompt", "Once upon",
                               "--max-tokens", "8", "--temperature", "0", "--ignore-eos", "--json"},
                              scratch.dir());
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const std::string want = nlohmann::json::parse(one.out).at("text").get<std::string>();

  PagodaProcess p(
      {"serve", model, "--host", "127.0.0.1", "--port", "0", "-tp", "2", "--log-level", "info"},
      scratch.dir());
  const int port = wait_until_serving(p, 120s);
  ASSERT_NE(port, 0) << p.err();
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(60, 0);
  const std::string body = R"({"model":")" + model +
                           R"(","prompt":"Once upon","max_tokens":8,"temperature":0,)"
                           R"("ignore_eos":true})";
  const auto first = client.Post("/v1/completions", body, "application/json");
  ASSERT_TRUE(first) << p.err();
  ASSERT_EQ(first->status, 200) << first->body;
  EXPECT_EQ(nlohmann::json::parse(first->body).at("choices").at(0).at("text"), want);

  const std::vector<pid_t> followers = rank_processes(model, 1);
  ASSERT_EQ(followers.size(), 1u);
  ::kill(followers.front(), SIGKILL);
  const auto second = client.Post("/v1/completions", body, "application/json");
  if (second) {
    EXPECT_GE(second->status, 500) << second->body;
  }
  const int code = p.wait_exit(30s);
  EXPECT_NE(code, 0) << p.err();
  EXPECT_NE(code, -1) << "serve hung after its follower died:\n" << p.err();
  EXPECT_NE(p.err().find("rank 1"), std::string::npos) << p.err();
}

}  // namespace
}  // namespace pagoda
