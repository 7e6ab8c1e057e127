// Startup summary and per-step debug lines; see engine_log.h.
#include "engine/engine_log.h"

#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/request.h"
#include "util/units.h"

namespace pagoda {
namespace {

class Differences {
 public:
  template <typename T>
  void add(const char* name, const T& value, const T& default_value) {
    if (value != default_value) items_.push_back(fmt::format("{}={}", name, value));
  }
  std::string join() const { return fmt::format("{}", fmt::join(items_, ", ")); }

 private:
  std::vector<std::string> items_;
};

}  // namespace

std::string non_default_engine_args(const EngineArgs& a) {
  const EngineArgs d;
  Differences diff;
  diff.add("model", a.model, d.model);
  diff.add("tokenizer", a.tokenizer, d.tokenizer);
  diff.add("served_model_name", a.served_model_name, d.served_model_name);
  diff.add("chat_template", a.chat_template, d.chat_template);
  diff.add("max_model_len", a.max_model_len, d.max_model_len);
  diff.add("max_num_seqs", a.max_num_seqs, d.max_num_seqs);
  diff.add("max_num_batched_tokens", a.max_num_batched_tokens, d.max_num_batched_tokens);
  diff.add("block_size", a.block_size, d.block_size);
  if (a.kv_cache_space_bytes != d.kv_cache_space_bytes)
    diff.add("kv_cache_space", format_bytes(a.kv_cache_space_bytes), std::string());
  diff.add("kv_cache_dtype", a.kv_cache_dtype, d.kv_cache_dtype);
  diff.add("speculative_config", a.speculative_config, d.speculative_config);
  diff.add("enable_prefix_caching", a.enable_prefix_caching, d.enable_prefix_caching);
  diff.add("enable_chunked_prefill", a.enable_chunked_prefill, d.enable_chunked_prefill);
  diff.add("long_prefill_token_threshold", a.long_prefill_token_threshold,
           d.long_prefill_token_threshold);
  diff.add("max_num_partial_prefills", a.max_num_partial_prefills, d.max_num_partial_prefills);
  diff.add("max_long_partial_prefills", a.max_long_partial_prefills, d.max_long_partial_prefills);
  diff.add("seed", a.seed, d.seed);
  diff.add("threads", a.num_threads, d.num_threads);
  diff.add("cpu_bind", a.cpu_bind, d.cpu_bind);
  diff.add("weights_memory", a.weights_memory, d.weights_memory);
  // Where the key of encrypted weights comes from, never the key, nor a command's text (it may
  // carry a token).
  diff.add("model_key_file", a.model_key_file, d.model_key_file);
  if (!a.model_key_command.empty()) diff.add("model_key", std::string("command"), std::string());
  diff.add("model_key_environment_variable", a.model_key_environment_variable,
           d.model_key_environment_variable);
  diff.add("quantization", a.quantization, d.quantization);
  diff.add("quantization_group_size", a.quantization_group_size, d.quantization_group_size);
  diff.add("int8_activations", a.int8_activations, d.int8_activations);
  diff.add("fp8_weights", a.fp8_weights, d.fp8_weights);
  diff.add("reasoning_parser", a.reasoning_parser, d.reasoning_parser);
  return diff.join();
}

double max_concurrency(int32_t num_blocks, int32_t block_size, int32_t max_model_len) {
  if (block_size <= 0 || max_model_len <= 0) return 0;
  const int64_t blocks_per_request = (int64_t{max_model_len} + block_size - 1) / block_size;
  return static_cast<double>(num_blocks) / static_cast<double>(blocks_per_request);
}

StepSummary summarize_step(const SchedulerOutput& scheduled, int64_t step) {
  StepSummary s;
  s.step = step;
  for (const ScheduledRequest& r : scheduled.requests) {
    // One new token past the prompt is a decode; anything else computes prompt (or, after a
    // preemption, recomputes prompt and output) and counts as prefill.
    const bool decode = r.num_new_tokens == 1 && r.start_position >= r.num_prompt_tokens;
    if (decode) {
      ++s.num_decode_requests;
      s.num_decode_tokens += r.num_new_tokens;
    } else {
      ++s.num_prefill_requests;
      s.num_prefill_tokens += r.num_new_tokens;
    }
  }
  s.num_preempted = static_cast<int32_t>(scheduled.preempted_request_ids.size());
  return s;
}

std::string format_step(const StepSummary& s, int32_t num_waiting, int32_t num_used_blocks,
                        int32_t num_blocks, double step_ms) {
  return fmt::format(
      "step {}: {} prefill ({} tokens), {} decode ({} tokens), {} preempted, {} waiting, KV "
      "blocks {}/{}, {:.1f} ms",
      s.step, s.num_prefill_requests, s.num_prefill_tokens, s.num_decode_requests,
      s.num_decode_tokens, s.num_preempted, num_waiting, num_used_blocks, num_blocks, step_ms);
}

}  // namespace pagoda
