// The vLLM v1-style scheduler: no prefill or decode phase, just requests whose
// num_computed_tokens catches up with their num_tokens under one token budget per step.
// Running requests go first (in order), then waiting ones first-come-first-served; prompts are
// chunked to fit the budget; when blocks run out the newest running request is preempted
// (blocks freed, recomputed later). It never touches tensors; the KvCacheManager is its only
// view of memory. After vllm/v1/core/sched/scheduler.py.
//
// Call order (one engine thread): add_request / abort_request / finish_request at any time
// between steps; then schedule() -> the model runner executes the SchedulerOutput (block copies
// first) -> update_from_output(). An abort between schedule() and update_from_output() is fine:
// the request is retired when its output comes back (the update skips its tokens).
// With max_concurrent_batches > 1 several schedule() calls may come before the update of the
// first of them; updates come in the order the batches were scheduled. A request is in at most
// one batch in flight (vLLM's scheduler skips requests already scheduled in the same way).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/engine_core_output.h"
#include "engine/kv_cache_manager.h"
#include "engine/request.h"
#include "engine/scheduler_output.h"

namespace pagoda {

struct SchedulerConfig {
  int32_t max_num_seqs = 256;             // running requests at most
  int32_t max_num_batched_tokens = 2048;  // token budget of one step
  int32_t max_model_len = 4096;           // prompt + output tokens of one request
  // A prefill chunk takes at most this many tokens per step, so long prompts don't crowd out
  // short ones (vLLM's long_prefill_token_threshold); 0 = no limit, or 4% of max_model_len
  // when max_num_partial_prefills > 1. Chunked prefill only.
  int32_t long_prefill_token_threshold = 0;
  // Concurrent partial prefills (vLLM's --max-num-partial-prefills, as its V0 scheduler does
  // them). 1: no limit beyond the budget. N > 1: at most N requests prefill in one step, each
  // chunk at most max_num_batched_tokens / (the step's prefills), and at most
  // max_long_partial_prefills of them with more than long_prefill_token_threshold tokens left;
  // a long prompt that finds no slot waits while shorter ones behind it are admitted, so one
  // burst of long prompts cannot hold every first token back. Chunked prefill only.
  int32_t max_num_partial_prefills = 1;
  int32_t max_long_partial_prefills = 1;
  // Off: a prompt is admitted only in a step where it fits whole (prompts longer than
  // max_num_batched_tokens are rejected by add_request).
  bool enable_chunked_prefill = true;
  int32_t block_size = 16;
  int32_t num_kv_blocks = 0;  // the pool the model runner allocated
  bool enable_prefix_caching = true;
  // The pool was sized for the requests at hand (EngineArgs::kv_cache_by_need), not for one
  // max_model_len sequence: each request is checked against it instead when added.
  bool kv_pool_sized_by_need = false;
  // KV slots allocated past each request's scheduled tokens, for a proposer that writes its
  // drafts' KV into blocks of the request's table (a draft model: num_speculative_tokens).
  int32_t num_lookahead_tokens = 0;
  // Batches the executor keeps in flight (pipeline stages). Above 1 each schedule() leaves out
  // the requests of batches still in flight, and takes at most 1/max_concurrent_batches of the
  // live requests (rounded up), so that the batches in flight are of even size.
  int32_t max_concurrent_batches = 1;
};

class Scheduler {
 public:
  // Throws pagoda::Error if the settings are inconsistent, e.g. one max_model_len sequence
  // needs more blocks than the pool has.
  explicit Scheduler(const SchedulerConfig& config);

  // Queues a request (status waiting). Throws pagoda::Error naming the request if it can never
  // run: empty prompt, duplicate id, prompt leaving no room for output under max_model_len,
  // prompt + max_tokens needing more blocks than the pool has, or (chunked prefill off) a
  // prompt over max_num_batched_tokens.
  void add_request(Request request);

  // Ends a request wherever it is (waiting, mid-prefill, decoding) and frees its blocks.
  // Returns the request with status finished_aborted, or nullptr if the id is unknown (or in
  // a batch in flight: it ends when that batch's output comes back).
  std::shared_ptr<Request> abort_request(const std::string& request_id);
  // Same with any finished status, e.g. kFinishedStopped when the engine matched a stop string.
  std::shared_ptr<Request> finish_request(const std::string& request_id, RequestStatus status);

  // Picks this step's requests and their token counts, allocates their blocks, and says what
  // the runner has not seen yet (new requests whole, running ones as diffs).
  SchedulerOutput schedule();
  // Appends sampled tokens, applies stop checks (max_tokens, EOS unless ignore_eos, stop token
  // ids, max_model_len; EOS and stop ids not before min_tokens), caches newly computed blocks and
  // retires finished requests. One entry per request that got a token, prompt logprobs or
  // finished.
  std::vector<EngineCoreOutput> update_from_output(const SchedulerOutput& scheduler_output,
                                                   const ModelRunnerOutput& runner_output);

  bool has_unfinished_requests() const { return !requests_.empty(); }
  int32_t num_waiting() const { return static_cast<int32_t>(waiting_.size()); }
  int32_t num_running() const { return static_cast<int32_t>(running_.size()); }
  int64_t num_preemptions() const { return num_preemptions_; }
  const Request* find_request(const std::string& request_id) const;
  const SchedulerConfig& config() const { return config_; }
  const KvCacheManager& kv_cache_manager() const { return kv_; }
  // Allocated vs. filled KV slots over the running requests (waste = unfilled block tails).
  KvSlotUsage kv_slot_usage() const;

 private:
  Request* live(const std::string& request_id) const;
  void preempt(Request* request);
  // Removes the request from the queues and the map, frees its blocks, sets `status`.
  std::shared_ptr<Request> retire(Request* request, RequestStatus status);
  // Stop checks after a token was appended; returns a finished status or kRunning.
  RequestStatus check_stop(Request& request) const;
  // Cap a prefill chunk per long_prefill_token_threshold and chunked-prefill settings.
  int32_t cap_chunk(int32_t num_new_tokens) const;
  bool limits_partial_prefills() const;
  bool is_long_prefill(int32_t num_new_tokens) const;
  // How many requests could prefill this step under max_num_partial_prefills (running ones in
  // prefill, then waiting ones a slot would admit); the step's prefill chunks share the budget.
  int32_t count_schedulable_prefills() const;
  // The lookahead slots to allocate for a request that will hold num_total_tokens: at most
  // num_lookahead_tokens, never past max_model_len or the request's last possible token.
  int32_t lookahead(const Request& request, int32_t num_total_tokens) const;
  // Adds `request`'s share of the step to `out` (request, new or cached data) and advances
  // num_computed_tokens past the tokens the runner computes now.
  // num_draft_tokens of num_new_tokens are the request's spec_token_ids (speculative decoding).
  void emit(Request& request, int32_t num_new_tokens, int32_t num_draft_tokens,
            SchedulerOutput& out);

  SchedulerConfig config_;
  KvCacheManager kv_;
  std::unordered_map<std::string, std::unique_ptr<Request>> requests_;  // every live request
  std::deque<Request*> waiting_;   // FCFS; preempted requests go back to the front
  std::vector<Request*> running_;  // oldest admitted first; the newest is preempted first
  std::vector<std::string> finished_since_schedule_;
  int64_t num_preemptions_ = 0;
};

}  // namespace pagoda
