// `pagoda bench throughput` and `pagoda bench latency`: offline engine benchmarks shaped like
// vLLM's benchmark_throughput.py / benchmark_latency.py, on random prompts of a fixed length.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tools/pagoda/commands.h"
#include "tools/pagoda/engine_options.h"
#include "tools/pagoda/tensor_parallel_launch.h"
#include "util/error.h"

namespace pagoda::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Random token ids in the tokenizer's ordinary range (ids near the top are often special).
std::vector<int32_t> random_prompt(std::mt19937_64& rng, int32_t length, int32_t vocab) {
  std::uniform_int_distribution<int32_t> token(10, std::max(11, vocab - 300));
  std::vector<int32_t> ids(static_cast<size_t>(length));
  for (int32_t& t : ids) t = token(rng);
  return ids;
}

int32_t prompt_vocab(const Engine& engine) {
  // The largest id the tokenizer produces for a long varied text bounds the ordinary range.
  const std::vector<int32_t> probe =
      engine.encode("The quick brown fox jumps over the lazy dog 0123456789", false);
  int32_t top = 0;
  for (int32_t id : probe) top = std::max(top, id);
  return std::max(top + 1, 64);
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(
      v.size() - 1, static_cast<size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

struct ThroughputFlags {
  EngineFlags engine;
  int num_prompts = 64;
  int input_len = 128;
  int output_len = 64;
  bool json = false;
};

int run_throughput(const ThroughputFlags& f) {
  init_runtime(f.engine);
  EngineArgs args = f.engine.to_engine_args();
  adopt_mpi_rank(args);  // under mpirun: this process is one rank of its world
  if (args.tensor_parallel_rank > 0) return run_follower_rank(args);
  const FollowerRanks followers(args);  // -tp N: ranks 1..N-1, waited for after the engine
  Engine engine(args);
  std::mt19937_64 rng(0);
  const int32_t vocab = prompt_vocab(engine);
  SamplingParams p;
  p.temperature = 1.0f;
  p.max_tokens = f.output_len;
  p.ignore_eos = true;
  const auto start = Clock::now();
  for (int i = 0; i < f.num_prompts; ++i) {
    engine.add_request_tokens(std::to_string(i), random_prompt(rng, f.input_len, vocab), p);
  }
  int64_t output_tokens = 0;
  while (engine.has_unfinished_requests()) {
    for (const RequestOutput& out : engine.step()) {
      if (out.finished) output_tokens += static_cast<int64_t>(out.outputs.front().token_ids.size());
    }
  }
  const double elapsed = seconds_since(start);
  const int64_t input_tokens = static_cast<int64_t>(f.num_prompts) * f.input_len;
  const nlohmann::json result = {
      {"elapsed_time_s", elapsed},
      {"num_requests", f.num_prompts},
      {"max_num_seqs", f.engine.args.max_num_seqs},
      {"requests_per_s", f.num_prompts / elapsed},
      {"input_tokens_per_s", input_tokens / elapsed},
      {"output_tokens_per_s", output_tokens / elapsed},
      {"total_tokens_per_s", (input_tokens + output_tokens) / elapsed},
      {"num_preemptions", engine.stats().num_preemptions},
  };
  if (f.json) {
    std::printf("%s\n", result.dump(2).c_str());
  } else {
    std::printf(
        "Throughput: %.2f requests/s, %.1f input tok/s, %.1f output tok/s, %.1f total tok/s (%.1f "
        "s)\n",
        result["requests_per_s"].get<double>(), result["input_tokens_per_s"].get<double>(),
        result["output_tokens_per_s"].get<double>(), result["total_tokens_per_s"].get<double>(),
        elapsed);
  }
  if (const std::string comm = engine.communication_summary(); !comm.empty())
    std::fprintf(stderr, "%s\n", comm.c_str());
  return 0;
}

struct LatencyFlags {
  EngineFlags engine;
  int batch_size = 1;
  int input_len = 512;
  int output_len = 128;
  int num_iters = 3;
  bool json = false;
};

// One run: the prefill of the whole batch, then decode steps until every sequence is done.
struct LatencyRun {
  double prefill_s = 0;
  std::vector<double> decode_step_s;
};

LatencyRun run_latency_once(Engine& engine, const LatencyFlags& f, std::mt19937_64& rng,
                            int32_t vocab, int iter) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = f.output_len;
  p.ignore_eos = true;
  for (int i = 0; i < f.batch_size; ++i) {
    engine.add_request_tokens(fmt::format("{}-{}", iter, i), random_prompt(rng, f.input_len, vocab),
                              p);
  }
  LatencyRun run;
  auto start = Clock::now();
  int num_with_first_token = 0;
  while (engine.has_unfinished_requests()) {
    const auto step_start = Clock::now();
    const std::vector<RequestOutput> outs = engine.step();
    const double step_s = seconds_since(step_start);
    if (num_with_first_token < f.batch_size) {
      for (const RequestOutput& o : outs)
        num_with_first_token += o.outputs.front().token_ids.size() == 1 ? 1 : 0;
      if (num_with_first_token >= f.batch_size) run.prefill_s = seconds_since(start);
    } else {
      run.decode_step_s.push_back(step_s);
    }
  }
  return run;
}

int run_latency(const LatencyFlags& f) {
  init_runtime(f.engine);
  EngineArgs args = f.engine.to_engine_args();
  // The whole batch's prompts in one step, as llama-bench's pp measures it.
  args.max_num_batched_tokens = std::max(args.max_num_batched_tokens, f.batch_size * f.input_len);
  args.max_num_seqs = std::max(args.max_num_seqs, f.batch_size);
  args.enable_prefix_caching = false;  // random prompts would not hit anyway; keep runs independent
  args.kv_cache_by_need = true;        // sized by the warm-up run
  adopt_mpi_rank(args);                // under mpirun: this process is one rank of its world
  if (args.tensor_parallel_rank > 0) return run_follower_rank(args);
  const FollowerRanks followers(args);  // -tp N: ranks 1..N-1, waited for after the engine
  Engine engine(args);
  std::mt19937_64 rng(0);
  const int32_t vocab = prompt_vocab(engine);
  run_latency_once(engine, f, rng, vocab, -1);  // warm-up: page in the weights
  const EngineStats before = engine.stats();
  std::vector<double> prefill, steps;
  for (int i = 0; i < f.num_iters; ++i) {
    LatencyRun r = run_latency_once(engine, f, rng, vocab, i);
    prefill.push_back(r.prefill_s);
    steps.insert(steps.end(), r.decode_step_s.begin(), r.decode_step_s.end());
  }
  const double prefill_s = percentile(prefill, 50);
  double decode_total = 0;
  for (double s : steps) decode_total += s;
  const double mean_step = steps.empty() ? 0 : decode_total / static_cast<double>(steps.size());
  // Tokens after each request's first: one per step without speculation, up to 1 + k with it.
  const double decode_tokens =
      static_cast<double>(f.num_iters) * f.batch_size * std::max(f.output_len - 1, 0);
  const EngineStats after = engine.stats();
  const auto draft_tokens =
      static_cast<double>(after.spec_num_draft_tokens - before.spec_num_draft_tokens);
  const auto accepted =
      static_cast<double>(after.spec_num_accepted_tokens - before.spec_num_accepted_tokens);
  const auto drafts = static_cast<double>(after.spec_num_drafts - before.spec_num_drafts);
  nlohmann::json result = {
      {"batch_size", f.batch_size},
      {"input_len", f.input_len},
      {"output_len", f.output_len},
      {"prefill_time_s", prefill_s},
      {"decode_step_p50_ms", percentile(steps, 50) * 1e3},
      {"decode_step_p99_ms", percentile(steps, 99) * 1e3},
      {"decode_step_mean_ms", mean_step * 1e3},
      // llama-bench's pp (prompt tokens / prefill time) and tg (generated tokens / decode time).
      {"pp_tokens_per_s", f.batch_size * f.input_len / prefill_s},
      {"tg_tokens_per_s", decode_total > 0 ? decode_tokens / decode_total : 0.0},
  };
  if (draft_tokens > 0) {
    // Speculative decoding (--speculative-config): vLLM's acceptance rate and mean accepted
    // length over the measured runs.
    result["spec_acceptance_rate"] = accepted / draft_tokens;
    result["spec_mean_accepted_length"] = 1.0 + accepted / drafts;
    result["spec_draft_tokens"] = draft_tokens;
    // Per draft position: accepted there / drafts (vLLM's per-position acceptance). Position 0
    // is the rate at which a first draft is right; later ones count only after acceptance.
    nlohmann::json per_pos = nlohmann::json::array();
    for (size_t pos = 0; pos < after.spec_num_accepted_tokens_per_pos.size(); ++pos) {
      const int64_t was = pos < before.spec_num_accepted_tokens_per_pos.size()
                              ? before.spec_num_accepted_tokens_per_pos[pos]
                              : 0;
      per_pos.push_back(static_cast<double>(after.spec_num_accepted_tokens_per_pos[pos] - was) /
                        drafts);
    }
    result["spec_acceptance_per_pos"] = per_pos;
  }
  // MoE models: the distinct routed experts a layer ran per decode step, plain and verifying
  // drafts (the union over the step's tokens, which grows with the batch and with k).
  const ExpertStepStats decode_experts = after.decode_experts - before.decode_experts;
  const ExpertStepStats verify_experts = after.verify_experts - before.verify_experts;
  for (const auto& [name, e] : {std::pair{"decode", decode_experts}, {"verify", verify_experts}}) {
    if (e.num_steps == 0 || e.num_moe_layers == 0) continue;
    result[fmt::format("{}_steps", name)] = e.num_steps;
    result[fmt::format("{}_tokens_per_step", name)] =
        static_cast<double>(e.num_tokens) / static_cast<double>(e.num_steps);
    result[fmt::format("{}_routed_experts_per_layer", name)] = e.experts_per_layer();
  }
  if (f.json) {
    std::printf("%s\n", result.dump(2).c_str());
  } else {
    std::printf("prefill %.3f s (%.1f tok/s); decode step p50 %.2f ms, p99 %.2f ms (%.1f tok/s)\n",
                prefill_s, result["pp_tokens_per_s"].get<double>(),
                result["decode_step_p50_ms"].get<double>(),
                result["decode_step_p99_ms"].get<double>(),
                result["tg_tokens_per_s"].get<double>());
    if (draft_tokens > 0) {
      std::printf("speculative: %.3f of %.0f drafted tokens accepted, mean accepted length %.2f\n",
                  result["spec_acceptance_rate"].get<double>(), draft_tokens,
                  result["spec_mean_accepted_length"].get<double>());
    }
    for (const char* name : {"decode", "verify"}) {
      const std::string key = fmt::format("{}_routed_experts_per_layer", name);
      if (!result.contains(key)) continue;
      std::printf("%s steps: %.1f tokens, %.1f distinct routed experts per MoE layer\n", name,
                  result[fmt::format("{}_tokens_per_step", name)].get<double>(),
                  result[key].get<double>());
    }
  }
  // -tp N: what the collectives cost per decode step and prefill token (docs/parallel.md).
  if (const std::string comm = engine.communication_summary(); !comm.empty())
    std::fprintf(stderr, "%s\n", comm.c_str());
  return 0;
}

}  // namespace

Command register_bench_engine(CLI::App& app) {
  auto tf = std::make_shared<ThroughputFlags>();
  CLI::App* throughput = bench_command(app)->add_subcommand(
      "throughput", "Offline throughput on random prompts (like vLLM's benchmark_throughput)");
  add_engine_options(throughput, tf->engine);
  add_tensor_parallel_options(throughput, tf->engine.args);
  throughput->add_option("--num-prompts", tf->num_prompts)->capture_default_str();
  throughput->add_option("--input-len", tf->input_len)->capture_default_str();
  throughput->add_option("--output-len", tf->output_len)->capture_default_str();
  throughput->add_flag("--json", tf->json, "Print the results as JSON");
  add_bench_runner(throughput, [tf] { return run_throughput(*tf); });

  auto lf = std::make_shared<LatencyFlags>();
  CLI::App* latency = bench_command(app)->add_subcommand(
      "latency",
      "Prefill time and per-step decode latency of one batch (like vLLM's benchmark_latency)");
  add_engine_options(latency, lf->engine);
  add_tensor_parallel_options(latency, lf->engine.args);
  latency->add_option("--batch-size", lf->batch_size)->capture_default_str();
  latency->add_option("--input-len", lf->input_len)->capture_default_str();
  latency->add_option("--output-len", lf->output_len)->capture_default_str();
  latency->add_option("--num-iters", lf->num_iters)->capture_default_str();
  latency->add_flag("--json", lf->json, "Print the results as JSON");
  add_bench_runner(latency, [lf] { return run_latency(*lf); });
  return [] { return 0; };
}

}  // namespace pagoda::cli
