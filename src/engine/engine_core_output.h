// What the engine core reports after a step, per request that made progress, in ids and numbers
// only: turning ids into text, stop strings and the caller's RequestOutputs are the output
// processor's job (after vLLM v1's EngineCoreOutput).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/request.h"
#include "engine/scheduler_output.h"

namespace pagoda {

struct EngineCoreOutput {
  std::string request_id;
  std::vector<int32_t> new_token_ids;          // usually one; none for a finish without one
  std::vector<PositionLogprobs> new_logprobs;  // one per new token, when asked for
  std::optional<PromptLogprobsChunk> prompt_logprobs;
  RequestStatus status = RequestStatus::kRunning;  // a finished status ends the request
  int32_t num_cached_tokens = 0;                   // prompt tokens served from the prefix cache

  bool finished() const { return is_finished(status); }
};

struct EngineCoreOutputs {
  std::vector<EngineCoreOutput> outputs;
  // Requests that ran for the first time this step (their queueing ends here).
  std::vector<std::string> first_scheduled_request_ids;
  double scheduled_time_s = 0;  // steady-clock seconds: when schedule() returned
  double computed_time_s = 0;   // ... and when the step's tokens were sampled
};

}  // namespace pagoda
