// The engine core: one loop of schedule -> execute -> update over requests that are already
// validated and tokenized. It owns the scheduler and the executor, sizes the KV pool (at start,
// or by need for offline runs), and reports per step what each request got, in ids
// (EngineCoreOutputs). Input and output processing live beside it (input_processor.h,
// output_processor.h). After vLLM v1's EngineCore; with an executor that keeps several batches
// in flight (pipeline parallelism), after its step_with_batch_queue.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine_core_output.h"
#include "engine/engine_log.h"
#include "engine/executor.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "pagoda/engine.h"

namespace pagoda {

struct EngineCoreConfig {
  // num_kv_blocks is the pool reserved at start; with kv_cache_by_need, the most it may grow to.
  SchedulerConfig scheduler;
  // No pool at start: whenever requests wait and none runs, size it to what they can use
  // (EngineArgs::kv_cache_by_need).
  bool kv_cache_by_need = false;
};

struct EngineCoreStats {
  int32_t num_running = 0;
  int32_t num_waiting = 0;
  double kv_cache_usage = 0;
  int32_t num_kv_blocks = 0;  // of the pool in use (0 before a pool sized by need)
  int64_t num_preemptions = 0;
  int64_t prefix_cache_queries = 0;
  int64_t prefix_cache_hits = 0;
  int64_t prompt_tokens_computed = 0;
  int64_t num_steps = 0;
  int32_t last_step_num_tokens = 0;
  // Speculative decoding (vLLM's SpecDecodingStats): requests verified with drafts, drafted
  // tokens verified, of those accepted, and accepted per draft position (0 = first draft).
  int64_t spec_num_drafts = 0;
  int64_t spec_num_draft_tokens = 0;
  int64_t spec_num_accepted_tokens = 0;
  std::vector<int64_t> spec_num_accepted_tokens_per_pos;
  // Routed experts of steps with every request past its prompt, without and with drafts.
  ExpertStepStats decode_experts;
  ExpertStepStats verify_experts;
};

class EngineCore {
 public:
  EngineCore(const EngineCoreConfig& config, std::unique_ptr<Executor> executor);
  // Takes the outputs of batches still in flight (an engine destroyed mid-run), so that no
  // later stage is left sending logits nobody receives.
  ~EngineCore();
  EngineCore(const EngineCore&) = delete;
  EngineCore& operator=(const EngineCore&) = delete;

  // Queues a request (one sample of a parent; all samples of a parent in one call, leader
  // first). Throws pagoda::Error if the scheduler refuses one; then none is queued.
  void add_requests(std::vector<Request> samples);
  // Ends requests wherever they are with `status` (aborted, or stopped by a stop string the
  // output processor matched); unknown ids are ignored.
  void finish_requests(const std::vector<std::string>& request_ids, RequestStatus status);
  // Schedules and runs one batch and returns what its requests got. With several batches in
  // flight, either starts a new batch and returns at once (nothing in the outputs), or takes
  // the oldest batch's output.
  EngineCoreOutputs step();
  bool has_unfinished_requests() const;

  EngineCoreStats stats() const;
  int32_t num_kv_blocks() const { return num_kv_blocks_; }
  double kv_reserve_seconds() const { return kv_reserve_s_; }
  const Executor& executor() const { return *executor_; }

 private:
  // vLLM's step_with_batch_queue: step() when the executor runs several batches at once.
  EngineCoreOutputs step_with_batch_queue();
  // Schedules a batch and counts it; the timing and first-scheduled ids go into `result`.
  SchedulerOutput schedule(EngineCoreOutputs& result);
  // Applies a batch's output to the scheduler; the requests' outputs go into `result`.
  void update(const SchedulerOutput& scheduled, const ModelRunnerOutput& output,
              EngineCoreOutputs& result);
  void log_step(const SchedulerOutput& scheduled, double t_start) const;
  void reserve_kv_pool(int32_t num_blocks);
  int32_t blocks_for(const Request& request) const;
  // kv_cache_by_need: once no request runs, sizes the pool for the pending requests and queues
  // them.
  void admit_pending();

  EngineCoreConfig config_;
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<Scheduler> scheduler_;  // null until a pool exists
  int32_t num_kv_blocks_ = 0;
  double kv_reserve_s_ = 0;
  // kv_cache_by_need: requests waiting for a pool that holds them (added before the first step,
  // or too large for the pool in use).
  std::vector<Request> pending_;
  // Batches started and not yet back, oldest first (max_concurrent_batches > 1).
  std::deque<SchedulerOutput> in_flight_;
  int64_t prompt_tokens_computed_ = 0;
  int64_t num_steps_ = 0;
  int32_t last_step_num_tokens_ = 0;
  int64_t spec_num_drafts_ = 0;
  int64_t spec_num_draft_tokens_ = 0;
  int64_t spec_num_accepted_tokens_ = 0;
  std::vector<int64_t> spec_num_accepted_tokens_per_pos_;
  ExpertStepStats decode_experts_;
  ExpertStepStats verify_experts_;
  // Adds a step's verified drafts to the counters above.
  void count_spec_decoding(const SchedulerOutput& scheduled, const ModelRunnerOutput& output);
  // Adds a decode or verify step's routed experts to decode_experts_ or verify_experts_.
  void count_experts(const SchedulerOutput& scheduled, const ModelRunnerOutput& output);
};

}  // namespace pagoda
