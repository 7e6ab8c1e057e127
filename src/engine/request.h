// One generation request as the engine core sees it: its tokens, how many of them have KV in the
// cache (num_computed_tokens), its status and its sampling settings. The scheduler owns every
// live Request; nothing here touches tensors.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pagoda/sampling_params.h"

namespace pagoda {
namespace grammar {
class CompiledGrammar;
}

enum class RequestStatus {
  kWaiting,
  kRunning,
  kPreempted,  // blocks freed; waits at the front of the queue to be recomputed
  kFinishedStopped,
  kFinishedLength,
  kFinishedAborted,
};

std::string_view request_status_name(RequestStatus status);
bool is_finished(RequestStatus status);
// The OpenAI finish_reason: "stop", "length", "abort"; empty while unfinished.
std::string_view finish_reason_name(RequestStatus status);

// A plain struct with one invariant kept behind accessors: all_token_ids() is always the prompt
// followed by the outputs (one contiguous vector, so the scheduler can hand out slices of it).
class Request {
 public:
  using Clock = std::chrono::steady_clock;

  Request() = default;
  Request(std::string request_id, std::vector<int32_t> prompt_token_ids,
          SamplingParams sampling_params = {}, std::vector<int32_t> eos_token_ids = {});

  std::string request_id;
  SamplingParams sampling_params;
  std::vector<int32_t> eos_token_ids;  // from generation_config / tokenizer; ignore_eos skips them
  RequestStatus status = RequestStatus::kWaiting;
  Clock::time_point arrival_time = Clock::now();

  // Tokens whose KV is in the cache (or scheduled to be written in the step in flight).
  int32_t num_computed_tokens = 0;
  // Prompt tokens served from the prefix cache when last admitted (for metrics).
  int32_t num_cached_prompt_tokens = 0;
  int32_t num_preemptions = 0;
  // Set when the request stopped on an EOS or stop token id.
  std::optional<int32_t> stop_token_id;

  // n > 1 support: a sample waits for its leader (sample 0 of the same prompt) to finish the
  // prompt, then forks the leader's prompt blocks instead of recomputing them. Empty when this
  // request is a leader, has n == 1, or has already forked.
  std::string fork_leader_id;

  // Prompt logprobs: every prompt row this request computes gets logits (not only the sampled
  // last one). Set by the engine on the one sample that computes the prompt for its parent and
  // cleared once the whole prompt is done, so a recompute after preemption costs nothing extra.
  bool wants_prompt_logits = false;

  // The RNG seed of the runner's sampler when sampling_params.seed is unset (one per request,
  // so unseeded requests differ).
  uint64_t sampling_seed = 0;

  // sampling_params.structured_outputs compiled by the input processor (null when unset); the
  // runner's sampler masks every step with it.
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  // With a grammar on a reasoning model: the think-end tokens after which the grammar applies
  // (empty: from the first output token, also when the prompt already closed the reasoning).
  std::vector<int32_t> reasoning_end_token_ids;

  // Speculative decoding: the tokens the runner drafted after the last step, scheduled (as many
  // as the budget and max_tokens allow) with the next one. Dropped on preemption.
  std::vector<int32_t> spec_token_ids;

  // What the model runner already holds, so each step sends it only the difference: whether it
  // has seen the request, how many of its blocks it knows, and whether it must take a whole new
  // table (resumed after preemption, which freed the old one).
  bool sent_to_runner = false;
  int32_t num_blocks_sent = 0;
  bool resumed_from_preemption = false;

  // In a batch whose output has not come back (pipeline parallelism: several batches in
  // flight): not scheduled again, not preempted, and a finish waits for the output
  // (finish_when_back, kRunning for none), so its blocks stay allocated until then.
  bool in_flight = false;
  RequestStatus finish_when_back = RequestStatus::kRunning;

  std::span<const int32_t> prompt_token_ids() const {
    return std::span<const int32_t>(tokens_).first(static_cast<size_t>(num_prompt_tokens_));
  }
  std::span<const int32_t> output_token_ids() const {
    return std::span<const int32_t>(tokens_).subspan(static_cast<size_t>(num_prompt_tokens_));
  }
  const std::vector<int32_t>& all_token_ids() const { return tokens_; }

  int32_t num_prompt_tokens() const { return num_prompt_tokens_; }
  int32_t num_output_tokens() const { return num_tokens() - num_prompt_tokens_; }
  int32_t num_tokens() const { return static_cast<int32_t>(tokens_.size()); }

  void append_output_token(int32_t token_id) { tokens_.push_back(token_id); }

 private:
  std::vector<int32_t> tokens_;  // prompt then outputs
  int32_t num_prompt_tokens_ = 0;
};

// Splits a request with sampling_params.n > 1 into n requests of n == 1 with ids
// "<id>#<i>". Sample 0 is the fork leader; the others carry fork_leader_id so the scheduler
// shares the leader's prompt blocks with them. A set seed becomes seed + i, so the samples
// differ but stay reproducible. With n <= 1 returns the request unchanged.
std::vector<Request> split_samples(Request request);

}  // namespace pagoda
