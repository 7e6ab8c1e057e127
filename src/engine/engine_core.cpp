#include "engine/engine_core.h"

#include <algorithm>
#include <chrono>

#include <spdlog/spdlog.h>

#include "util/clock.h"
#include "util/error.h"
#include "util/units.h"

namespace pagoda {
EngineCore::EngineCore(const EngineCoreConfig& config, std::unique_ptr<Executor> executor)
    : config_(config), executor_(std::move(executor)) {
  if (!config_.kv_cache_by_need) reserve_kv_pool(config_.scheduler.num_kv_blocks);
}

EngineCore::~EngineCore() {
  while (!in_flight_.empty()) {
    try {
      executor_->finish_oldest_batch(in_flight_.front());
    } catch (const std::exception& e) {
      spdlog::warn("engine: a batch in flight at shutdown failed: {}", e.what());
      return;
    }
    in_flight_.pop_front();
  }
}

void EngineCore::reserve_kv_pool(int32_t num_blocks) {
  scheduler_.reset();
  num_kv_blocks_ = 0;
  kv_reserve_s_ = executor_->initialize_kv_cache(num_blocks);
  num_kv_blocks_ = num_blocks;
  SchedulerConfig sc = config_.scheduler;
  sc.num_kv_blocks = num_blocks;
  sc.max_concurrent_batches = executor_->max_concurrent_batches();
  sc.kv_pool_sized_by_need = config_.kv_cache_by_need;
  scheduler_ = std::make_unique<Scheduler>(sc);
}

int32_t EngineCore::blocks_for(const Request& request) const {
  const SchedulerConfig& sc = config_.scheduler;
  const int64_t tokens = std::min<int64_t>(
      int64_t{request.num_prompt_tokens()} + request.sampling_params.max_tokens, sc.max_model_len);
  return static_cast<int32_t>((tokens + sc.block_size - 1) / sc.block_size);
}

void EngineCore::add_requests(std::vector<Request> samples) {
  if (config_.kv_cache_by_need) {
    // Each fits the ceiling, which holds a max_model_len sequence (plan_kv_cache).
    int64_t needed = 0;
    for (const Request& r : samples) needed += blocks_for(r);
    // Straight to the scheduler when the pool in use holds the request and nothing waits ahead
    // of it; otherwise it waits for the pool to be sized.
    if (!scheduler_ || !pending_.empty() || needed > num_kv_blocks_) {
      for (Request& r : samples) pending_.push_back(std::move(r));
      return;
    }
  }
  std::vector<std::string> added;
  try {
    for (Request& r : samples) {
      std::string id = r.request_id;
      scheduler_->add_request(std::move(r));
      added.push_back(std::move(id));
    }
  } catch (...) {
    for (const std::string& id : added) scheduler_->abort_request(id);
    throw;
  }
}

void EngineCore::finish_requests(const std::vector<std::string>& request_ids,
                                 RequestStatus status) {
  for (const std::string& id : request_ids) {
    std::erase_if(pending_, [&](const Request& r) { return r.request_id == id; });
    if (scheduler_) scheduler_->finish_request(id, status);
  }
}

void EngineCore::admit_pending() {
  // A new pool replaces the runners' state, which a batch in flight still uses.
  if (pending_.empty() || (scheduler_ && scheduler_->has_unfinished_requests()) ||
      !in_flight_.empty())
    return;
  int64_t needed = 0;
  for (const Request& r : pending_) needed += blocks_for(r);
  if (needed > num_kv_blocks_) {
    // Doubling keeps a conversation that grows turn by turn from reallocating every turn.
    const int64_t grown = std::max<int64_t>(needed, int64_t{num_kv_blocks_} * 2);
    reserve_kv_pool(
        static_cast<int32_t>(std::min<int64_t>(grown, config_.scheduler.num_kv_blocks)));
    const int64_t bytes = executor_->kv_cache_spec().bytes_per_token() *
                          config_.scheduler.block_size * num_kv_blocks_;
    spdlog::info("KV cache sized by need: {} blocks of {} tokens, {}, reserved in {:.2f} s",
                 num_kv_blocks_, config_.scheduler.block_size,
                 format_bytes(static_cast<uint64_t>(bytes)), kv_reserve_s_);
  }
  std::vector<Request> queued = std::move(pending_);
  pending_.clear();
  for (Request& r : queued) scheduler_->add_request(std::move(r));
}

SchedulerOutput EngineCore::schedule(EngineCoreOutputs& result) {
  SchedulerOutput scheduled = scheduler_->schedule();
  result.scheduled_time_s = steady_seconds();
  if (!scheduled.empty()) {
    ++num_steps_;
    last_step_num_tokens_ = scheduled.total_num_scheduled_tokens;
    for (const ScheduledRequest& r : scheduled.requests) {
      if (r.start_position < r.num_prompt_tokens) {
        prompt_tokens_computed_ +=
            std::min(r.start_position + r.num_new_tokens, r.num_prompt_tokens) - r.start_position;
      }
    }
    for (const NewRequestData& r : scheduled.new_requests)
      result.first_scheduled_request_ids.push_back(r.request_id);
  }
  return scheduled;
}

void EngineCore::update(const SchedulerOutput& scheduled, const ModelRunnerOutput& output,
                        EngineCoreOutputs& result) {
  result.computed_time_s = steady_seconds();
  count_spec_decoding(scheduled, output);
  count_experts(scheduled, output);
  result.outputs = scheduler_->update_from_output(scheduled, output);
}

void EngineCore::log_step(const SchedulerOutput& scheduled, double t_start) const {
  if (!spdlog::should_log(spdlog::level::debug) ||
      (scheduled.empty() && scheduled.preempted_request_ids.empty()))
    return;
  const KvCacheManager& kv = scheduler_->kv_cache_manager();
  spdlog::debug("{}", format_step(summarize_step(scheduled, num_steps_), scheduler_->num_waiting(),
                                  kv.num_blocks() - kv.num_free_blocks(), kv.num_blocks(),
                                  (steady_seconds() - t_start) * 1e3));
}

EngineCoreOutputs EngineCore::step() {
  if (executor_->max_concurrent_batches() > 1) return step_with_batch_queue();
  const double t_start = steady_seconds();
  EngineCoreOutputs result;
  admit_pending();
  if (!scheduler_) return result;
  const SchedulerOutput scheduled = schedule(result);
  // The runner is told of finished requests even in a step with nothing to compute.
  if (!scheduled.empty() || !scheduled.finished_request_ids.empty())
    update(scheduled, executor_->execute_model(scheduled), result);
  log_step(scheduled, t_start);
  return result;
}

// Starts a new batch while fewer than max_concurrent_batches are in flight and the scheduler
// finds requests for it (those of batches in flight it leaves out), and returns at once; takes
// the oldest batch's output when the queue is full or nothing new could start. So a pipeline of
// P stages runs P batches of different requests, one per stage.
EngineCoreOutputs EngineCore::step_with_batch_queue() {
  const double t_start = steady_seconds();
  EngineCoreOutputs result;
  admit_pending();
  if (!scheduler_) return result;
  const auto most = static_cast<size_t>(executor_->max_concurrent_batches());
  if (in_flight_.size() < most) {
    SchedulerOutput scheduled = schedule(result);
    log_step(scheduled, t_start);
    const bool computes = !scheduled.empty();
    if (computes || !scheduled.finished_request_ids.empty()) {
      executor_->start_batch(scheduled);
      in_flight_.push_back(std::move(scheduled));
    }
    if (computes && in_flight_.size() < most) return result;
  }
  if (in_flight_.empty()) return result;
  const SchedulerOutput oldest = std::move(in_flight_.front());
  in_flight_.pop_front();
  update(oldest, executor_->finish_oldest_batch(oldest), result);
  return result;
}

void EngineCore::count_spec_decoding(const SchedulerOutput& scheduled,
                                     const ModelRunnerOutput& output) {
  for (size_t i = 0; i < scheduled.requests.size(); ++i) {
    const auto num_drafts = static_cast<int64_t>(scheduled.requests[i].draft_token_ids.size());
    if (num_drafts == 0 || i >= output.num_accepted_draft_tokens.size()) continue;
    const int64_t accepted = output.num_accepted_draft_tokens[i];
    ++spec_num_drafts_;
    spec_num_draft_tokens_ += num_drafts;
    spec_num_accepted_tokens_ += accepted;
    if (spec_num_accepted_tokens_per_pos_.size() < static_cast<size_t>(num_drafts)) {
      spec_num_accepted_tokens_per_pos_.resize(static_cast<size_t>(num_drafts), 0);
    }
    for (int64_t pos = 0; pos < accepted; ++pos) {
      ++spec_num_accepted_tokens_per_pos_[static_cast<size_t>(pos)];
    }
  }
}

void EngineCore::count_experts(const SchedulerOutput& scheduled, const ModelRunnerOutput& output) {
  if (output.num_moe_layers == 0 || scheduled.requests.empty()) return;
  bool drafts = false;
  for (const ScheduledRequest& r : scheduled.requests) {
    // A prompt chunk or a recomputation after preemption: the step is neither kind.
    const auto decode_tokens = static_cast<int32_t>(1 + r.draft_token_ids.size());
    if (r.start_position < r.num_prompt_tokens || r.num_new_tokens != decode_tokens) return;
    drafts = drafts || !r.draft_token_ids.empty();
  }
  ExpertStepStats& into = drafts ? verify_experts_ : decode_experts_;
  ++into.num_steps;
  into.num_tokens += scheduled.total_num_scheduled_tokens;
  into.num_moe_layers += output.num_moe_layers;
  into.num_routed_experts += output.num_routed_experts;
}

bool EngineCore::has_unfinished_requests() const {
  return !pending_.empty() || !in_flight_.empty() ||
         (scheduler_ && scheduler_->has_unfinished_requests());
}

EngineCoreStats EngineCore::stats() const {
  EngineCoreStats st;
  st.num_waiting = static_cast<int32_t>(pending_.size());
  st.num_kv_blocks = num_kv_blocks_;
  st.prompt_tokens_computed = prompt_tokens_computed_;
  st.num_steps = num_steps_;
  st.last_step_num_tokens = last_step_num_tokens_;
  st.spec_num_drafts = spec_num_drafts_;
  st.spec_num_draft_tokens = spec_num_draft_tokens_;
  st.spec_num_accepted_tokens = spec_num_accepted_tokens_;
  st.spec_num_accepted_tokens_per_pos = spec_num_accepted_tokens_per_pos_;
  st.decode_experts = decode_experts_;
  st.verify_experts = verify_experts_;
  if (!scheduler_) return st;
  const Scheduler& s = *scheduler_;
  st.num_running = s.num_running();
  st.num_waiting += s.num_waiting();
  st.kv_cache_usage = s.kv_cache_manager().usage();
  st.num_preemptions = s.num_preemptions();
  st.prefix_cache_queries = s.kv_cache_manager().prefix_cache_stats().num_query_tokens;
  st.prefix_cache_hits = s.kv_cache_manager().prefix_cache_stats().num_hit_tokens;
  return st;
}

}  // namespace pagoda
