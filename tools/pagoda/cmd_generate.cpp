// `pagoda generate`: offline generation for one prompt, a chat message, or a file of prompts.
// stdout carries only the generated text (or JSON with --json); statistics go to stderr.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "tools/pagoda/commands.h"
#include "tools/pagoda/engine_options.h"
#include "tools/pagoda/tensor_parallel_launch.h"
#include "util/error.h"

namespace pagoda::cli {
namespace {

struct GenerateFlags {
  EngineFlags engine;
  SamplingFlags sampling;
  std::vector<std::string> prompts;
  std::string chat;
  std::string prompts_file;
  bool json = false;
};

// A line of --prompts-file: plain text, or a JSON object {"prompt": ..., sampling fields}.
struct PromptLine {
  std::string prompt;
  SamplingParams params;
};

SamplingParams params_from_json(const nlohmann::json& j, SamplingParams p,
                                const std::string& where) {
  try {
    if (j.contains("max_tokens")) p.max_tokens = j.at("max_tokens").get<int>();
    if (j.contains("min_tokens")) p.min_tokens = j.at("min_tokens").get<int>();
    if (j.contains("n")) p.n = j.at("n").get<int>();
    if (j.contains("temperature")) p.temperature = j.at("temperature").get<float>();
    if (j.contains("top_p")) p.top_p = j.at("top_p").get<float>();
    if (j.contains("top_k")) p.top_k = j.at("top_k").get<int>();
    if (j.contains("min_p")) p.min_p = j.at("min_p").get<float>();
    if (j.contains("presence_penalty")) p.presence_penalty = j.at("presence_penalty").get<float>();
    if (j.contains("frequency_penalty"))
      p.frequency_penalty = j.at("frequency_penalty").get<float>();
    if (j.contains("repetition_penalty"))
      p.repetition_penalty = j.at("repetition_penalty").get<float>();
    if (j.contains("seed")) p.seed = j.at("seed").get<uint64_t>();
    if (j.contains("stop")) {
      p.stop = j.at("stop").is_string() ? std::vector<std::string>{j.at("stop").get<std::string>()}
                                        : j.at("stop").get<std::vector<std::string>>();
    }
    if (j.contains("stop_token_ids"))
      p.stop_token_ids = j.at("stop_token_ids").get<std::vector<int32_t>>();
    if (j.contains("ignore_eos")) p.ignore_eos = j.at("ignore_eos").get<bool>();
    if (j.contains("logprobs")) p.logprobs = j.at("logprobs").get<int>();
  } catch (const nlohmann::json::exception& e) {
    fail("{}: {}", where, e.what());
  }
  return p;
}

std::vector<PromptLine> read_prompts_file(const std::string& path, const SamplingParams& defaults) {
  std::ifstream in(path);
  if (!in) fail("{}: cannot open", path);
  std::vector<PromptLine> lines;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    const std::string where = fmt::format("{}:{}", path, line_no);
    if (line.front() == '{') {
      nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object()) fail("{}: not a valid JSON object", where);
      if (!j.contains("prompt") || !j["prompt"].is_string())
        fail("{}: needs a string \"prompt\"", where);
      lines.push_back({j["prompt"].get<std::string>(), params_from_json(j, defaults, where)});
    } else {
      lines.push_back({line, defaults});
    }
  }
  return lines;
}

nlohmann::json output_json(const CompletionOutput& o) {
  nlohmann::json j = {
      {"text", o.text}, {"token_ids", o.token_ids}, {"finish_reason", o.finish_reason}};
  if (o.index != 0) j["index"] = o.index;
  if (!o.logprobs.empty()) {
    nlohmann::json lp = nlohmann::json::array();
    for (const GeneratedTokenLogprobs& t : o.logprobs) {
      nlohmann::json top = nlohmann::json::array();
      for (const TokenLogprobInfo& x : t.top) {
        top.push_back({{"token_id", x.token_id}, {"token", x.token}, {"logprob", x.logprob}});
      }
      lp.push_back({{"token_id", t.chosen.token_id},
                    {"token", t.chosen.token},
                    {"logprob", t.chosen.logprob},
                    {"top_logprobs", top}});
    }
    j["logprobs"] = lp;
  }
  return j;
}

void print_stats(const std::vector<RequestOutput>& outputs) {
  int64_t prompt_tokens = 0, cached_tokens = 0, generated = 0;
  double prefill_s = 0, decode_s = 0;
  int64_t decode_tokens = 0;
  for (const RequestOutput& r : outputs) {
    prompt_tokens += static_cast<int64_t>(r.prompt_token_ids.size());
    cached_tokens += r.num_cached_tokens;
    const RequestMetrics& m = r.metrics;
    prefill_s = std::max(prefill_s, m.first_token_time_s - m.first_scheduled_time_s);
    for (const CompletionOutput& o : r.outputs) {
      generated += static_cast<int64_t>(o.token_ids.size());
      decode_tokens += std::max<int64_t>(0, static_cast<int64_t>(o.token_ids.size()) - 1);
    }
    decode_s = std::max(decode_s, m.last_token_time_s - m.first_token_time_s);
  }
  const int64_t computed = prompt_tokens - cached_tokens;  // prefix-cache hits cost no prefill
  std::fprintf(stderr,
               "prompt tokens: %lld (%lld from the prefix cache), generated tokens: %lld, prefill: "
               "%.1f tok/s, "
               "decode: %.1f tok/s\n",
               static_cast<long long>(prompt_tokens), static_cast<long long>(cached_tokens),
               static_cast<long long>(generated), prefill_s > 0 ? computed / prefill_s : 0.0,
               decode_s > 0 ? decode_tokens / decode_s : 0.0);
}

int run_generate(const GenerateFlags& f) {
  init_runtime(f.engine);
  spdlog::info("pagoda {}", PAGODA_VERSION);
  const int num_sources = (!f.prompts.empty()) + (!f.chat.empty()) + (!f.prompts_file.empty());
  if (num_sources != 1) fail("give exactly one of --prompt, --chat or --prompts-file");
  EngineArgs args = f.engine.to_engine_args();
  args.kv_cache_by_need = true;  // the prompts at hand, not a quarter of the machine
  adopt_mpi_rank(args);          // under mpirun: this process is one rank of its world
  if (args.tensor_parallel_rank > 0) return run_follower_rank(args);
  const FollowerRanks followers(args);  // -tp N: ranks 1..N-1, waited for after the engine
  Engine engine(args);
  const SamplingParams defaults = f.sampling.apply(engine.default_sampling_params());

  std::vector<std::string> prompts;
  std::vector<SamplingParams> params;
  if (!f.prompts_file.empty()) {
    for (PromptLine& line : read_prompts_file(f.prompts_file, defaults)) {
      prompts.push_back(std::move(line.prompt));
      params.push_back(line.params);
    }
  } else if (!f.chat.empty()) {
    const nlohmann::json messages =
        nlohmann::json::array({{{"role", "user"}, {"content", f.chat}}});
    prompts.push_back(engine.apply_chat_template(messages.dump(), true));
    params.push_back(defaults);
  } else {
    prompts = f.prompts;
    params.assign(prompts.size(), defaults);
  }

  std::vector<RequestOutput> outputs;
  if (!f.chat.empty()) {
    // The template already holds BOS and the special tokens: tokenize without adding more.
    std::vector<int32_t> ids = engine.encode(prompts.front(), false);
    engine.add_request_tokens("0", std::move(ids), params.front());
    while (engine.has_unfinished_requests()) {
      for (RequestOutput& out : engine.step()) {
        if (out.finished) outputs.push_back(std::move(out));
      }
    }
  } else {
    outputs = engine.generate(prompts, params);
  }

  for (const RequestOutput& r : outputs) {
    for (const CompletionOutput& o : r.outputs) {
      if (f.json) {
        std::printf(
            "%s\n",
            output_json(o).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
      } else {
        std::printf("%s\n", o.text.c_str());
      }
    }
  }
  std::fflush(stdout);
  print_stats(outputs);
  // A KV pool too small for every running request makes the scheduler preempt and recompute.
  if (const int64_t n = engine.stats().num_preemptions; n > 0)
    std::fprintf(stderr, "preemptions: %lld (KV cache full)\n", static_cast<long long>(n));
  if (const std::string comm = engine.communication_summary(); !comm.empty())
    std::fprintf(stderr, "%s\n", comm.c_str());
  return 0;
}

}  // namespace

Command register_generate(CLI::App& app) {
  auto flags = std::make_shared<GenerateFlags>();
  CLI::App* sub = app.add_subcommand("generate", "Generate text offline for prompts");
  add_engine_options(sub, flags->engine);
  add_tensor_parallel_options(sub, flags->engine.args);
  add_sampling_options(sub, flags->sampling);
  sub->add_option("--prompt", flags->prompts, "Prompt text (repeatable)");
  sub->add_option("--chat", flags->chat, "A user message, wrapped in the model's chat template");
  sub->add_option("--prompts-file", flags->prompts_file,
                  "One prompt per line, or JSONL objects {\"prompt\": ..., sampling fields}");
  sub->add_flag("--json", flags->json, "Print one JSON object per output");
  return [flags] { return run_generate(*flags); };
}

}  // namespace pagoda::cli
