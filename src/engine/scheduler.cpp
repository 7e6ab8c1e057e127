// Scheduler: admission checks, the per-step budget walk (running, then waiting), preemption,
// n > 1 forks, and the stop checks after each step.
#include "engine/scheduler.h"

#include <algorithm>
#include <cassert>
#include <utility>

#include "util/error.h"

namespace pagoda {

namespace {

KvCacheConfig cache_config(const SchedulerConfig& c) {
  return KvCacheConfig{c.num_kv_blocks, c.block_size, c.enable_prefix_caching};
}

bool contains(const std::vector<int32_t>& ids, int32_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

Scheduler::Scheduler(const SchedulerConfig& config) : config_(config), kv_(cache_config(config)) {
  if (config.max_num_seqs <= 0) fail("scheduler: max_num_seqs must be positive");
  if (config.max_num_batched_tokens <= 0)
    fail("scheduler: max_num_batched_tokens must be positive");
  if (config.max_model_len <= 1) fail("scheduler: max_model_len must be at least 2");
  // One sequence of max_model_len tokens must fit alone, or it could be preempted forever.
  const int64_t blocks_per_seq =
      (static_cast<int64_t>(config.max_model_len) + config.block_size - 1) / config.block_size;
  if (!config.kv_pool_sized_by_need && blocks_per_seq > config.num_kv_blocks) {
    fail(
        "scheduler: max_model_len {} needs {} KV blocks of {} tokens but the pool has {}; "
        "lower --max-model-len or raise --kv-cache-space",
        config.max_model_len, blocks_per_seq, config.block_size, config.num_kv_blocks);
  }
  if (config.max_num_partial_prefills < 1)
    fail("scheduler: max_num_partial_prefills must be at least 1");
  if (config.max_long_partial_prefills < 1 ||
      config.max_long_partial_prefills > config.max_num_partial_prefills) {
    fail("scheduler: max_long_partial_prefills must be in [1, max_num_partial_prefills {}], got {}",
         config.max_num_partial_prefills, config.max_long_partial_prefills);
  }
  // vLLM's default: with concurrent partial prefills, "long" starts at 4% of the context.
  if (limits_partial_prefills() && config_.long_prefill_token_threshold == 0)
    config_.long_prefill_token_threshold = std::max(1, config.max_model_len / 25);
}

void Scheduler::add_request(Request request) {
  const std::string& id = request.request_id;
  if (requests_.contains(id)) fail("request {}: duplicate request id", id);
  if (request.num_prompt_tokens() == 0) fail("request {}: empty prompt", id);
  if (request.num_prompt_tokens() >= config_.max_model_len) {
    fail("request {}: prompt of {} tokens leaves no room for output (max_model_len {})", id,
         request.num_prompt_tokens(), config_.max_model_len);
  }
  // Alone in the pool it must reach its end, or it would be preempted forever.
  const int64_t most_tokens =
      std::min<int64_t>(int64_t{request.num_prompt_tokens()} + request.sampling_params.max_tokens,
                        config_.max_model_len);
  const int64_t blocks_needed = (most_tokens + config_.block_size - 1) / config_.block_size;
  if (blocks_needed > config_.num_kv_blocks) {
    fail("request {}: {} tokens need {} KV blocks of {} tokens but the pool has {}", id,
         most_tokens, blocks_needed, config_.block_size, config_.num_kv_blocks);
  }
  if (!config_.enable_chunked_prefill &&
      request.num_prompt_tokens() > config_.max_num_batched_tokens) {
    fail(
        "request {}: prompt of {} tokens exceeds max_num_batched_tokens {} and chunked prefill "
        "is disabled",
        id, request.num_prompt_tokens(), config_.max_num_batched_tokens);
  }
  if (request.sampling_params.max_tokens < 1) {
    fail("request {}: max_tokens must be at least 1, got {}", id,
         request.sampling_params.max_tokens);
  }
  if (!request.fork_leader_id.empty() && !requests_.contains(request.fork_leader_id)) {
    request.fork_leader_id.clear();  // leader gone: compute the prompt like any request
  }
  request.status = RequestStatus::kWaiting;
  request.num_computed_tokens = 0;
  auto owned = std::make_unique<Request>(std::move(request));
  waiting_.push_back(owned.get());
  requests_.emplace(owned->request_id, std::move(owned));
}

Request* Scheduler::live(const std::string& request_id) const {
  auto it = requests_.find(request_id);
  return it == requests_.end() ? nullptr : it->second.get();
}

const Request* Scheduler::find_request(const std::string& request_id) const {
  return live(request_id);
}

std::shared_ptr<Request> Scheduler::abort_request(const std::string& request_id) {
  return finish_request(request_id, RequestStatus::kFinishedAborted);
}

std::shared_ptr<Request> Scheduler::finish_request(const std::string& request_id,
                                                   RequestStatus status) {
  assert(is_finished(status));
  Request* request = live(request_id);
  if (request == nullptr) return nullptr;
  if (request->in_flight && config_.max_concurrent_batches > 1) {
    // Its batch still runs on the stages after the first, on its blocks and its runner state.
    if (request->finish_when_back == RequestStatus::kRunning) request->finish_when_back = status;
    return nullptr;
  }
  return retire(request, status);
}

std::shared_ptr<Request> Scheduler::retire(Request* request, RequestStatus status) {
  if (auto it = std::find(running_.begin(), running_.end(), request); it != running_.end()) {
    running_.erase(it);
  }
  if (auto it = std::find(waiting_.begin(), waiting_.end(), request); it != waiting_.end()) {
    waiting_.erase(it);
  }
  kv_.free(*request);
  request->status = status;
  finished_since_schedule_.push_back(request->request_id);
  auto node = requests_.extract(request->request_id);
  return std::shared_ptr<Request>(std::move(node.mapped()));
}

void Scheduler::preempt(Request* request) {
  kv_.free(*request);
  request->resumed_from_preemption = request->sent_to_runner;
  request->status = RequestStatus::kPreempted;
  request->num_computed_tokens = 0;
  request->spec_token_ids.clear();
  ++request->num_preemptions;
  ++num_preemptions_;
  waiting_.push_front(request);
}

int32_t Scheduler::cap_chunk(int32_t num_new_tokens) const {
  if (config_.enable_chunked_prefill && config_.long_prefill_token_threshold > 0) {
    return std::min(num_new_tokens, config_.long_prefill_token_threshold);
  }
  return num_new_tokens;
}

bool Scheduler::limits_partial_prefills() const {
  return config_.enable_chunked_prefill && config_.max_num_partial_prefills > 1;
}

bool Scheduler::is_long_prefill(int32_t num_new_tokens) const {
  return num_new_tokens > config_.long_prefill_token_threshold;
}

int32_t Scheduler::count_schedulable_prefills() const {
  const int32_t most = config_.max_num_partial_prefills;
  int32_t prefills = 0, long_prefills = 0;
  for (const Request* r : running_) {
    const int32_t left = r->num_tokens() - r->num_computed_tokens;
    if (left <= 1) continue;
    ++prefills;
    if (is_long_prefill(left)) ++long_prefills;
  }
  for (const Request* r : waiting_) {
    if (prefills >= most) break;
    const int32_t left = r->num_tokens() - r->num_computed_tokens;
    if (!r->fork_leader_id.empty() || left <= 1) continue;
    if (is_long_prefill(left)) {
      if (long_prefills >= config_.max_long_partial_prefills) continue;
      ++long_prefills;
    }
    ++prefills;
  }
  return std::min(prefills, most);
}

int32_t Scheduler::lookahead(const Request& request, int32_t num_total_tokens) const {
  if (config_.num_lookahead_tokens == 0) return 0;
  const int64_t last =
      std::min<int64_t>(config_.max_model_len,
                        int64_t{request.num_prompt_tokens()} + request.sampling_params.max_tokens);
  return static_cast<int32_t>(
      std::clamp<int64_t>(last - num_total_tokens, 0, config_.num_lookahead_tokens));
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  out.finished_request_ids = std::move(finished_since_schedule_);
  finished_since_schedule_.clear();

  struct Pick {
    Request* request;
    int32_t num_new_tokens;
    int32_t num_draft_tokens = 0;  // the last of num_new_tokens
  };
  std::vector<Pick> picks;
  int32_t budget = config_.max_num_batched_tokens;
  // With batches in flight: an even share of the live requests per batch.
  const int32_t num_batches = std::max(1, config_.max_concurrent_batches);
  const auto most_picks =
      num_batches == 1 ? requests_.size()
                       : (requests_.size() + static_cast<size_t>(num_batches) - 1) / num_batches;

  // Partial-prefill slots (max_num_partial_prefills > 1): a request with more than one token to
  // catch up is a prefill; it runs this step only if a slot is free, and its chunk is capped at
  // its share of the budget.
  const bool limit_prefills = limits_partial_prefills();
  const int32_t prefill_share =
      limit_prefills
          ? std::max(1, config_.max_num_batched_tokens / std::max(1, count_schedulable_prefills()))
          : budget;
  int32_t num_prefills = 0, num_long_prefills = 0;
  const auto slot_free = [&](bool is_long) {
    return num_prefills < config_.max_num_partial_prefills &&
           (!is_long || num_long_prefills < config_.max_long_partial_prefills);
  };
  const auto take_slot = [&](bool is_long) {
    ++num_prefills;
    if (is_long) ++num_long_prefills;
  };

  // 1. Running requests, oldest first. If one cannot get blocks, preempt from the newest end
  //    until it can (or it was itself the newest).
  size_t index = 0;
  while (index < running_.size() && budget > 0 && picks.size() < most_picks) {
    Request* request = running_[index];
    if (request->in_flight) {
      ++index;
      continue;
    }
    int32_t num_new = request->num_tokens() - request->num_computed_tokens;
    const bool prefill = limit_prefills && num_new > 1;
    const bool is_long = prefill && is_long_prefill(num_new);
    if (prefill && !slot_free(is_long)) {
      ++index;  // no slot this step: it keeps its blocks and goes on in a later step
      continue;
    }
    num_new = std::min({cap_chunk(num_new), budget, prefill ? prefill_share : budget});
    if (num_new <= 0) {
      ++index;
      continue;
    }
    // A decode carries the drafted tokens along, as many as the budget leaves room for and as
    // could still be kept: the bonus token after them must fit max_tokens and max_model_len.
    int32_t num_drafts = 0;
    if (num_new == 1 && !request->spec_token_ids.empty()) {
      const int32_t room =
          std::min(request->sampling_params.max_tokens - request->num_output_tokens() - 1,
                   config_.max_model_len - request->num_tokens() - 1);
      num_drafts = std::clamp(
          std::min(static_cast<int32_t>(request->spec_token_ids.size()), budget - num_new), 0,
          std::max(room, 0));
      num_new += num_drafts;
    }
    bool allocated = false;
    while (true) {
      if (kv_.allocate_slots(*request, num_new, nullptr,
                             lookahead(*request, request->num_computed_tokens + num_new))) {
        allocated = true;
        break;
      }
      // The newest request not in flight (a batch in flight computes on its blocks); at worst
      // the request itself, which is not in flight.
      auto newest = std::find_if(running_.rbegin(), running_.rend(),
                                 [](const Request* r) { return !r->in_flight; });
      assert(newest != running_.rend());
      Request* victim = *newest;
      running_.erase(std::next(newest).base());
      preempt(victim);
      out.preempted_request_ids.push_back(victim->request_id);
      if (victim == request) break;
    }
    if (!allocated) break;
    if (prefill) take_slot(is_long);
    picks.push_back({request, num_new, num_drafts});
    budget -= num_new;
    ++index;
  }

  // 2. Waiting requests, first come first served, unless this step had to preempt (then memory
  //    is short and admitting more would only cause more preemption).
  size_t w = 0;
  while (out.preempted_request_ids.empty() && w < waiting_.size() && budget > 0 &&
         static_cast<int32_t>(running_.size()) < config_.max_num_seqs &&
         picks.size() < most_picks) {
    Request* request = waiting_[w];

    if (!request->fork_leader_id.empty()) {
      const Request* leader = live(request->fork_leader_id);
      if (leader == nullptr) {
        request->fork_leader_id.clear();  // leader finished: fall through to a normal prefill
      } else if (leader->status != RequestStatus::kRunning ||
                 leader->num_computed_tokens < leader->num_prompt_tokens()) {
        ++w;  // its prompt KV is not there yet; others may go ahead (not a resource wait)
        continue;
      } else {
        BlockCopy copy;
        if (!kv_.fork(*leader, *request, copy)) break;
        request->fork_leader_id.clear();
        request->num_computed_tokens = request->num_prompt_tokens() - 1;
        request->num_cached_prompt_tokens = request->num_computed_tokens;
        const bool ok = kv_.allocate_slots(*request, 1);  // the forked blocks already cover it
        assert(ok);
        (void)ok;
        out.block_copies.push_back(copy);
        request->status = RequestStatus::kRunning;
        running_.push_back(request);
        waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(w));
        picks.push_back({request, 1});
        budget -= 1;
        continue;
      }
    }

    // Classed by its tokens left before any prefix-cache hit, as vLLM does: a long prompt
    // without a slot lets the shorter ones behind it go first.
    const int32_t left = request->num_tokens() - request->num_computed_tokens;
    const bool prefill = limit_prefills && left > 1;
    const bool is_long = prefill && is_long_prefill(left);
    if (prefill && !slot_free(is_long)) {
      ++w;
      continue;
    }

    // A new or preempted request holds no blocks: start from its longest cached prefix.
    ComputedBlocks computed;
    if (request->num_computed_tokens == 0) computed = kv_.get_computed_blocks(*request);
    int32_t num_new = request->num_tokens() - computed.num_tokens;
    if (!config_.enable_chunked_prefill) {
      // Whole or not at all; only a resumed request longer than any budget must be chunked.
      if (num_new > budget && num_new <= config_.max_num_batched_tokens) break;
    }
    num_new = std::min({cap_chunk(num_new), budget, prefill ? prefill_share : budget});
    if (!kv_.allocate_slots(*request, num_new, &computed,
                            lookahead(*request, computed.num_tokens + num_new))) {
      break;
    }
    if (prefill) take_slot(is_long);
    request->num_computed_tokens = computed.num_tokens;
    request->num_cached_prompt_tokens = std::min(computed.num_tokens, request->num_prompt_tokens());
    request->status = RequestStatus::kRunning;
    running_.push_back(request);
    waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(w));
    picks.push_back({request, num_new});
    budget -= num_new;
  }

  // 3. Emit the batch; the runner computes these tokens now.
  out.requests.reserve(picks.size());
  for (const Pick& pick : picks)
    emit(*pick.request, pick.num_new_tokens, pick.num_draft_tokens, out);
  assert(out.total_num_scheduled_tokens <= config_.max_num_batched_tokens);
  assert(static_cast<int32_t>(running_.size()) <= config_.max_num_seqs);
  return out;
}

void Scheduler::emit(Request& r, int32_t num_new_tokens, int32_t num_draft_tokens,
                     SchedulerOutput& out) {
  const auto table = kv_.block_table(r.request_id);
  if (!r.sent_to_runner) {
    NewRequestData data;
    data.request_id = r.request_id;
    data.prompt_token_ids.assign(r.prompt_token_ids().begin(), r.prompt_token_ids().end());
    data.sampling_params = r.sampling_params;
    data.eos_token_ids = r.eos_token_ids;
    data.sampling_seed = r.sampling_seed;
    data.grammar = r.grammar;
    data.reasoning_end_token_ids = r.reasoning_end_token_ids;
    data.block_ids.assign(table.begin(), table.end());
    data.num_computed_tokens = r.num_computed_tokens;
    out.new_requests.push_back(std::move(data));
    r.sent_to_runner = true;
  } else {
    CachedRequestData data;
    data.request_id = r.request_id;
    data.resumed_from_preemption = r.resumed_from_preemption;
    const size_t known = r.resumed_from_preemption ? 0 : static_cast<size_t>(r.num_blocks_sent);
    data.new_block_ids.assign(table.begin() + static_cast<std::ptrdiff_t>(known), table.end());
    data.num_computed_tokens = r.num_computed_tokens;
    out.cached_requests.push_back(std::move(data));
    r.resumed_from_preemption = false;
  }
  r.num_blocks_sent = static_cast<int32_t>(table.size());
  r.in_flight = true;

  ScheduledRequest s;
  s.request_id = r.request_id;
  s.start_position = r.num_computed_tokens;
  s.num_new_tokens = num_new_tokens;
  s.num_prompt_tokens = r.num_prompt_tokens();
  r.num_computed_tokens += num_new_tokens;
  s.sample = r.num_computed_tokens >= r.num_tokens();
  s.draft_token_ids.assign(r.spec_token_ids.begin(), r.spec_token_ids.begin() + num_draft_tokens);
  r.spec_token_ids.clear();
  s.all_logits = r.wants_prompt_logits && s.start_position < r.num_prompt_tokens();
  // Once the prompt is computed its logprobs are out: a recompute after preemption costs
  // nothing extra.
  if (r.num_computed_tokens >= r.num_prompt_tokens()) r.wants_prompt_logits = false;
  assert(r.num_computed_tokens <= r.num_tokens() + num_draft_tokens);
  assert(static_cast<int64_t>(table.size()) * config_.block_size >= r.num_computed_tokens);
  out.total_num_scheduled_tokens += num_new_tokens;
  out.requests.push_back(std::move(s));
}

RequestStatus Scheduler::check_stop(Request& request) const {
  const SamplingParams& params = request.sampling_params;
  const int32_t last = request.all_token_ids().back();
  if (request.num_output_tokens() >= params.min_tokens) {
    // Under a grammar EOS is drawn only where the grammar is complete (the mask allows nothing
    // else there), so it ends the request even with ignore_eos, as vLLM's does.
    const bool eos_ends = !params.ignore_eos || request.grammar != nullptr;
    if (eos_ends && contains(request.eos_token_ids, last)) {
      return RequestStatus::kFinishedStopped;
    }
    if (contains(params.stop_token_ids, last)) {
      request.stop_token_id = last;
      return RequestStatus::kFinishedStopped;
    }
  }
  if (request.num_output_tokens() >= params.max_tokens ||
      request.num_tokens() >= config_.max_model_len) {
    return RequestStatus::kFinishedLength;
  }
  return RequestStatus::kRunning;
}

std::vector<EngineCoreOutput> Scheduler::update_from_output(
    const SchedulerOutput& scheduler_output, const ModelRunnerOutput& runner_output) {
  const size_t num = scheduler_output.requests.size();
  if (runner_output.sampled_token_ids.size() != num || runner_output.logprobs.size() != num ||
      runner_output.prompt_logprobs.size() != num) {
    fail("scheduler: model runner returned {} sampled tokens for a batch of {} requests",
         runner_output.sampled_token_ids.size(), num);
  }
  std::vector<EngineCoreOutput> outputs;
  for (size_t i = 0; i < num; ++i) {
    const ScheduledRequest& scheduled = scheduler_output.requests[i];
    Request* request = live(scheduled.request_id);
    if (request != nullptr) request->in_flight = false;
    // Gone (aborted after schedule()) or preempted and re-queued since: nothing to apply.
    if (request == nullptr || request->status != RequestStatus::kRunning) continue;
    // Aborted (or stopped) while its batch was in flight: it ends now, its output unused.
    if (request->finish_when_back != RequestStatus::kRunning) {
      retire(request, request->finish_when_back);
      continue;
    }
    EngineCoreOutput output;
    output.request_id = request->request_id;
    output.prompt_logprobs = runner_output.prompt_logprobs[i];
    output.num_cached_tokens = request->num_cached_prompt_tokens;
    // A prefill chunk short of the prompt's end has nothing sampled.
    if (scheduled.sample) {
      const auto num_drafts = static_cast<int32_t>(scheduled.draft_token_ids.size());
      const int32_t num_accepted =
          num_drafts == 0 ? 0 : runner_output.num_accepted_draft_tokens.at(i);
      assert(num_accepted >= 0 && num_accepted <= num_drafts);
      // The KV of rejected drafts is garbage: step back before any block is hashed, so the
      // next step rewrites those slots and no cached block ever holds a rejected token.
      request->num_computed_tokens -= num_drafts - num_accepted;
      // The accepted drafts, then the runner's token; stop checks after each, so nothing is
      // emitted past a stop.
      for (int32_t j = 0; j <= num_accepted && !is_finished(output.status); ++j) {
        const int32_t token_id =
            j < num_accepted ? scheduled.draft_token_ids[j] : runner_output.sampled_token_ids[i];
        assert(token_id >= 0);
        request->append_output_token(token_id);
        output.new_token_ids.push_back(token_id);
        if (j == num_accepted && runner_output.logprobs[i]) {
          output.new_logprobs.push_back(*runner_output.logprobs[i]);
        } else if (j < num_accepted && i < runner_output.draft_logprobs.size() &&
                   static_cast<size_t>(j) < runner_output.draft_logprobs[i].size()) {
          output.new_logprobs.push_back(runner_output.draft_logprobs[i][static_cast<size_t>(j)]);
        }
        output.status = check_stop(*request);
      }
      // Stopped inside the accepted drafts: only the tokens kept count as computed.
      request->num_computed_tokens = std::min(request->num_computed_tokens, request->num_tokens());
    }
    kv_.cache_computed_blocks(*request);
    if (is_finished(output.status)) {
      retire(request, output.status);
    } else if (i < runner_output.draft_token_ids.size()) {
      request->spec_token_ids = runner_output.draft_token_ids[i];
    }
    if (!output.new_token_ids.empty() || output.prompt_logprobs) {
      outputs.push_back(std::move(output));
    }
  }
  return outputs;
}

KvSlotUsage Scheduler::kv_slot_usage() const {
  std::vector<const Request*> running(running_.begin(), running_.end());
  return kv_.slot_usage(running);
}

}  // namespace pagoda
