// The plain data that crosses between the engine core and the model runner each step, after
// vLLM v1's SchedulerOutput / ModelRunnerOutput / EngineCoreOutput. Nothing here points into
// scheduler memory: the runner keeps its own copy of each request's tokens and block table and
// is told only what changed (new requests whole, running ones as diffs), so a SchedulerOutput
// can be serialized and sent to a runner in another process (engine/serialization.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pagoda/sampling_params.h"

namespace pagoda {
namespace grammar {
class CompiledGrammar;
}

// A request the runner has not seen: everything it needs to feed and sample it.
struct NewRequestData {
  std::string request_id;
  std::vector<int32_t> prompt_token_ids;
  SamplingParams sampling_params;
  std::vector<int32_t> eos_token_ids;  // for min_tokens (EOS is suppressed until then)
  uint64_t sampling_seed = 0;          // the RNG seed when sampling_params.seed is unset
  std::vector<int32_t> block_ids;      // the whole block table after this step's allocation
  int32_t num_computed_tokens = 0;     // KV already in the cache (prefix hit, fork)
  // The compiled sampling_params.structured_outputs. In process only: serialization leaves it
  // out (a runner in another process would compile the spec in the params itself).
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  // The grammar applies after the output emitted these (a reasoning model's think end).
  std::vector<int32_t> reasoning_end_token_ids;
  friend bool operator==(const NewRequestData&, const NewRequestData&) = default;
};

// A request the runner already holds: what changed since it last ran. The runner appended the
// tokens it sampled itself, so no token ids travel here.
struct CachedRequestData {
  std::string request_id;
  // Preempted and now resumed: block_ids is the whole new table, not an append.
  bool resumed_from_preemption = false;
  std::vector<int32_t> new_block_ids;
  int32_t num_computed_tokens = 0;
  friend bool operator==(const CachedRequestData&, const CachedRequestData&) = default;
};

// One request's share of the step, in batch order (running requests first, then admitted ones).
struct ScheduledRequest {
  std::string request_id;
  int32_t start_position = 0;  // the step feeds positions [start, start + num_new_tokens)
  int32_t num_new_tokens = 0;
  int32_t num_prompt_tokens = 0;  // tells prefill from decode (logs, metrics)
  // The step reaches the end of the request's known tokens: its last row is sampled. False for
  // a prefill chunk that stops short of the prompt's end.
  bool sample = false;
  // Every row needs logits (prompt logprobs): the request asked for them and this step
  // computes prompt positions.
  bool all_logits = false;
  // Speculative decoding: tokens drafted after the request's known ones, fed at the positions
  // after them in this step (they are the last draft_token_ids.size() of num_new_tokens) and
  // verified against the logits of the rows before them. Empty without speculation.
  std::vector<int32_t> draft_token_ids;
  friend bool operator==(const ScheduledRequest&, const ScheduledRequest&) = default;
};

// Copy-on-write for n > 1: copy the KV of block src into block dst (every layer) before the
// forward pass of the step that carries it.
struct BlockCopy {
  int32_t src_block_id = -1;
  int32_t dst_block_id = -1;
  friend bool operator==(const BlockCopy&, const BlockCopy&) = default;
};

struct SchedulerOutput {
  std::vector<NewRequestData> new_requests;
  std::vector<CachedRequestData> cached_requests;
  std::vector<ScheduledRequest> requests;  // the batch, in order
  int32_t total_num_scheduled_tokens = 0;
  std::vector<BlockCopy> block_copies;             // perform before the forward pass
  std::vector<std::string> preempted_request_ids;  // preempted in this schedule() call
  // Finished since the previous step: the runner drops its state for them.
  std::vector<std::string> finished_request_ids;

  bool empty() const { return requests.empty(); }
  friend bool operator==(const SchedulerOutput&, const SchedulerOutput&) = default;
};

// A token and its log-probability; rank 1 is the most likely token (0: not computed).
struct LogprobEntry {
  int32_t token_id = 0;
  float logprob = 0.0f;
  int32_t rank = 0;
  friend bool operator==(const LogprobEntry&, const LogprobEntry&) = default;
};

// One position: the token there (sampled, or the prompt's) and the most likely alternatives.
struct PositionLogprobs {
  LogprobEntry chosen;
  std::vector<LogprobEntry> top;  // best first
  friend bool operator==(const PositionLogprobs&, const PositionLogprobs&) = default;
};

// The prompt logprobs one step computed for a request: positions first_position, +1, ...
struct PromptLogprobsChunk {
  int32_t first_position = 0;
  std::vector<PositionLogprobs> positions;
  friend bool operator==(const PromptLogprobsChunk&, const PromptLogprobsChunk&) = default;
};

// What the runner computed; entry i answers SchedulerOutput::requests[i].
struct ModelRunnerOutput {
  std::vector<int32_t> sampled_token_ids;  // -1 where the request was not sampled
  // Set where the request was sampled and asked for logprobs.
  std::vector<std::optional<PositionLogprobs>> logprobs;
  // Set where the step computed prompt positions of a request asking for prompt logprobs.
  std::vector<std::optional<PromptLogprobsChunk>> prompt_logprobs;
  // Speculative decoding; both empty when no request of the step had drafts or proposals.
  // How many of requests[i].draft_token_ids were accepted: the step's new tokens are those
  // drafts, then sampled_token_ids[i] (the correction at the first rejection, or the bonus
  // token after the last draft).
  std::vector<int32_t> num_accepted_draft_tokens;
  // Where requests[i] asked for logprobs: those of its accepted drafts, in order, from the rows
  // that verified them (the token after them has its own in logprobs). Empty when no request
  // of the step had drafts.
  std::vector<std::vector<PositionLogprobs>> draft_logprobs;
  // Tokens drafted for each request's next step (empty where none).
  std::vector<std::vector<int32_t>> draft_token_ids;
  // The step's forward over the target model (Model::last_forward_expert_usage): MoE layers run
  // and the distinct routed experts they ran, summed over those layers; zero for dense models.
  int64_t num_moe_layers = 0;
  int64_t num_routed_experts = 0;
  friend bool operator==(const ModelRunnerOutput&, const ModelRunnerOutput&) = default;
};

}  // namespace pagoda
