// The plain structs that cross between the scheduler and the model runner each step:
// SchedulerOutput (which requests, which tokens, which blocks; never a tensor) and
// ModelRunnerOutput (what was sampled). After vLLM v1's SchedulerOutput / ModelRunnerOutput.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace pagoda {

class Request;

// Copy-on-write for n > 1: copy the KV of block src into block dst (every layer) before the
// forward pass of the step that carries it.
struct BlockCopy {
  int32_t src_block_id = -1;
  int32_t dst_block_id = -1;
  friend bool operator==(const BlockCopy&, const BlockCopy&) = default;
};

struct ScheduledRequest {
  std::string request_id;
  Request* request = nullptr;  // owned by the scheduler; the engine is single-threaded
  // The tokens to feed: all_token_ids[start_position, start_position + token_ids.size()).
  // Valid until update_from_output appends new tokens.
  std::span<const int32_t> token_ids;
  int32_t start_position = 0;  // positions of token_ids are start_position, start_position + 1, ...
  // The whole block table after this step's allocation: token at position p has its KV in
  // block block_ids[p / block_size], slot p % block_size.
  std::vector<int32_t> block_ids;
  // True when this step reaches the end of the request's known tokens, so the logits of its last
  // row must be sampled. False for a prefill chunk that stops short of the prompt's end.
  bool sample = false;
  // Every row of this step needs logits (prompt logprobs): the request wants prompt logits and
  // this step computes prompt positions.
  bool all_logits = false;

  int32_t num_new_tokens() const { return static_cast<int32_t>(token_ids.size()); }
};

struct SchedulerOutput {
  // Running requests first (in running order), then the ones admitted this step.
  std::vector<ScheduledRequest> requests;
  int32_t total_num_scheduled_tokens = 0;
  int32_t block_size = 0;
  std::vector<BlockCopy> block_copies;             // perform before the forward pass
  std::vector<std::string> preempted_request_ids;  // preempted in this schedule() call
  std::vector<std::string> finished_request_ids;   // finished since the previous step

  bool empty() const { return requests.empty(); }
};

// One sampled token. The lead's sampler may extend this with an opaque logprobs payload.
struct SampledToken {
  int32_t token_id = -1;
};

// sampled_tokens[i] answers scheduler_output.requests[i] (same order: the runner fills the
// vector while walking the batch, no per-step map). Entries for requests with sample == false
// are ignored (a partial prefill's logits are not sampled).
struct ModelRunnerOutput {
  std::vector<SampledToken> sampled_tokens;
};

// What update_from_output reports per request that produced a token or finished.
struct RequestUpdate {
  std::string request_id;
  std::vector<int32_t> new_token_ids;  // usually one; empty for a finish without a new token
  bool finished = false;
  // Set when finished: the request leaves the scheduler and is handed to the caller whole
  // (status says stop/length/abort; outputs, num_cached_prompt_tokens, ... for metrics).
  std::shared_ptr<Request> finished_request;
};

}  // namespace pagoda
