// The engine's own log lines, kept out of the engine loop's way: what a startup summary says
// (non-default settings, weight format, KV capacity and concurrency, as vLLM logs them) and the
// one-line description of a step that --log-level debug prints.
#pragma once

#include <cstdint>
#include <string>

#include "engine/scheduler_output.h"
#include "pagoda/engine.h"

namespace pagoda {

// "max_model_len=2048, kv_cache_dtype=fp32": every EngineArgs field that differs from a
// default-constructed EngineArgs, with vLLM's flag spelling; "" when all are defaults.
std::string non_default_engine_args(const EngineArgs& args);

// How many requests of max_model_len tokens the KV pool holds at once (vLLM's "Maximum
// concurrency for N tokens per request: X.XXx"): whole blocks per request, as allocation goes.
double max_concurrency(int32_t num_blocks, int32_t block_size, int32_t max_model_len);

// What a step scheduled, for --log-level debug:
// "step 12: 1 prefill (512 tokens), 7 decode (7 tokens), 0 preempted, 3 waiting, KV blocks
// 40/512, 31.2 ms".
struct StepSummary {
  int64_t step = 0;
  int32_t num_prefill_requests = 0;
  int32_t num_prefill_tokens = 0;
  int32_t num_decode_requests = 0;
  int32_t num_decode_tokens = 0;
  int32_t num_preempted = 0;
};
StepSummary summarize_step(const SchedulerOutput& scheduled, int64_t step);
std::string format_step(const StepSummary& s, int32_t num_waiting, int32_t num_used_blocks,
                        int32_t num_blocks, double step_ms);

}  // namespace pagoda
