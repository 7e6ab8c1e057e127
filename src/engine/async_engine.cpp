// The engine thread and its command queue; see include/pagoda/async_engine.h.
#include "pagoda/async_engine.h"

#include <algorithm>
#include <exception>
#include <optional>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "engine/stats_logger.h"
#include "util/clock.h"

namespace pagoda {

void OutputQueue::set_listener(std::function<void()> listener) {
  std::lock_guard lock(mutex_);
  listener_ = std::move(listener);
}

void OutputQueue::push(EngineEvent event) {
  std::function<void()> listener;
  {
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(event));
    listener = listener_;
  }
  cv_.notify_one();
  if (listener) listener();
}

bool OutputQueue::pop_all(std::vector<EngineEvent>& out, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
  while (!events_.empty()) {
    out.push_back(std::move(events_.front()));
    events_.pop_front();
  }
  return true;
}

// Everything the engine thread owns, and the command queue other threads feed it.
class AsyncEngine::Impl {
 public:
  Impl(Factory factory, AsyncEngineOptions options);
  ~Impl();

  void start();
  void stop();
  std::string failure() const;
  const EngineBackend* backend() const;
  EngineStats stats() const;
  bool wait_ready(std::chrono::milliseconds timeout) const;
  void submit(Submission submission);
  void abort(const std::string& request_id);
  void abort_all();
  void begin_drain();
  void fail_now(const std::string& reason);

  std::atomic<State> state_{State::kLoading};
  std::atomic<int64_t> num_in_flight_{0};

 private:
  struct Command {
    enum class Kind { kAdd, kAbort, kAbortAll } kind;
    Submission submission;
    std::string request_id;
  };
  struct Live {
    std::shared_ptr<OutputQueue> queue;
    int tag = 0;
    int64_t num_prompt_tokens = 0;
    int64_t n = 1;
    int64_t max_tokens = 0;
    int64_t num_tokens_seen = 0;
    double last_token_time_s = 0;
    // Outputs arrive as deltas (RequestOutputKind::kDelta: a stream costs O(length)); what an
    // abort or the finish metrics need of the whole is counted here.
    std::vector<int32_t> prompt_token_ids;  // until the first output has carried them
    std::vector<int64_t> sample_num_tokens;
    std::vector<bool> sample_finished;
  };

  void run();
  void apply(Command& command);
  void dispatch(std::vector<RequestOutput>& outputs);
  void finish(const std::string& request_id, Live& live, const RequestOutput& output);
  void fail_all(const std::string& reason);
  // Ends every live and queued request with `err` and marks the engine dead (once).
  void end_everything(const EngineEventError& err, const std::string& reason);
  void publish_stats();
  void record_step();  // the step's token count to the observer
  void log_stats();    // the periodic stats line, when one is due

  Factory factory_;
  AsyncEngineOptions options_;
  AsyncEngineObserver* observer_;  // options_.observer, or null
  std::unique_ptr<EngineBackend> backend_;

  mutable std::mutex mutex_;  // guards commands_, stop_, failure_, stats_
  mutable std::condition_variable cv_;
  std::vector<Command> commands_;
  bool stop_ = false;
  std::string failure_;
  EngineStats stats_;

  // Guards live_. The engine thread takes it while it touches live_ (applying commands,
  // dispatching a step's outputs; never across a step, which may block in a collective), and
  // fail_now() takes it to end the requests of an engine thread that may never return.
  // Lock order: live_mutex_, then mutex_.
  std::mutex live_mutex_;
  std::unordered_map<std::string, Live> live_;
  StatsLogger stats_logger_;        // engine thread only
  int64_t num_steps_recorded_ = 0;  // engine thread only
  std::thread thread_;
};

AsyncEngine::Impl::Impl(Factory factory, AsyncEngineOptions options)
    : factory_(std::move(factory)),
      options_(std::move(options)),
      observer_(options_.observer.get()),
      stats_logger_(options_.stats_interval_s) {}

AsyncEngine::Impl::~Impl() {
  stop();
}

void AsyncEngine::Impl::start() {
  thread_ = std::thread([this] { run(); });
}

void AsyncEngine::Impl::stop() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string AsyncEngine::Impl::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

const EngineBackend* AsyncEngine::Impl::backend() const {
  const State s = state_.load();
  return (s == State::kReady || s == State::kDraining) ? backend_.get() : nullptr;
}

EngineStats AsyncEngine::Impl::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

bool AsyncEngine::Impl::wait_ready(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  return cv_.wait_for(lock, timeout, [&] { return state_.load() != State::kLoading; }) &&
         state_.load() == State::kReady;
}

void AsyncEngine::Impl::submit(Submission submission) {
  switch (state_.load()) {
    case State::kLoading:
      throw EngineUnavailableError("The model is still loading");
    case State::kDraining:
    case State::kStopped:
      throw EngineUnavailableError("The server is shutting down");
    case State::kDead:
      throw EngineUnavailableError("The engine has failed: " + failure());
    case State::kReady:
      break;
  }
  // A new grammar compiles here, on the submitting thread: on the engine thread it would stall
  // every running request for a step. A spec that does not compile is left to the engine thread,
  // which rejects it with the compiler's message as for any other invalid request.
  try {
    backend_->prepare_request(submission.params);
  } catch (const std::exception&) {
  }
  {
    std::lock_guard lock(mutex_);
    // Everything submitted and unfinished that is not running is waiting, including commands the
    // engine thread has not picked up yet; counting it this way is exact even when the last
    // published stats lag a step behind (num_running only changes while requests run).
    const int64_t waiting = std::max<int64_t>(0, num_in_flight_.load() - stats_.num_running);
    if (waiting >= options_.max_waiting_requests) {
      throw EngineUnavailableError(
          fmt::format("Too many requests waiting ({} >= --max-waiting-requests {}); retry later",
                      waiting, options_.max_waiting_requests));
    }
    ++num_in_flight_;
    Command c{Command::Kind::kAdd, std::move(submission), {}};
    commands_.push_back(std::move(c));
  }
  cv_.notify_all();
}

void AsyncEngine::Impl::abort(const std::string& request_id) {
  {
    std::lock_guard lock(mutex_);
    commands_.push_back(Command{Command::Kind::kAbort, {}, request_id});
  }
  cv_.notify_all();
}

void AsyncEngine::Impl::abort_all() {
  {
    std::lock_guard lock(mutex_);
    commands_.push_back(Command{Command::Kind::kAbortAll, {}, {}});
  }
  cv_.notify_all();
}

void AsyncEngine::Impl::begin_drain() {
  State expected = State::kReady;
  state_.compare_exchange_strong(expected, State::kDraining);
  expected = State::kLoading;
  state_.compare_exchange_strong(expected, State::kDraining);
}

void AsyncEngine::Impl::publish_stats() {
  EngineStats s = backend_->stats();
  std::lock_guard lock(mutex_);
  stats_ = s;
}

void AsyncEngine::Impl::record_step() {
  const EngineStats s = backend_->stats();
  if (s.num_steps == num_steps_recorded_) return;  // the scheduler had nothing to run
  num_steps_recorded_ = s.num_steps;
  if (observer_) observer_->on_step(s.last_step_num_tokens);
}

void AsyncEngine::Impl::log_stats() {
  if (!options_.log_stats) return;
  // stats_ is written by this thread only, so reading it needs no lock.
  if (std::optional<std::string> line = stats_logger_.update(stats_, steady_seconds()))
    spdlog::info("{}", *line);
}

void AsyncEngine::Impl::run() {
  try {
    backend_ = factory_();
    if (observer_) observer_->on_loaded(*backend_);
    publish_stats();
  } catch (const std::exception& e) {
    spdlog::error("loading the engine failed: {}", e.what());
    {
      std::lock_guard lock(mutex_);
      failure_ = std::string("loading failed: ") + e.what();
      backend_.reset();
    }
    state_ = State::kDead;
    cv_.notify_all();
    return;
  }
  {
    // Under the lock, so that wait_ready() cannot miss the change.
    std::lock_guard lock(mutex_);
    State expected = State::kLoading;
    state_.compare_exchange_strong(expected, State::kReady);
  }
  cv_.notify_all();
  spdlog::info("engine ready: model {}, max_model_len {}", backend_->model_name(),
               backend_->max_model_len());

  try {
    // Idle, the loop still wakes once per stats interval, so that the line closing a busy period
    // is not held back until the next request.
    const auto idle_wait = std::chrono::duration<double>(options_.stats_interval_s);
    log_stats();  // the first interval starts now, with the counters at zero
    while (true) {
      std::vector<Command> commands;
      {
        std::unique_lock lock(mutex_);
        const auto work = [&] {
          return stop_ || !commands_.empty() || backend_->has_unfinished_requests();
        };
        if (options_.log_stats) {
          cv_.wait_for(lock, idle_wait, work);
        } else {
          cv_.wait(lock, work);
        }
        if (stop_) break;
        commands.swap(commands_);
      }
      {
        std::lock_guard live_lock(live_mutex_);
        for (Command& c : commands) apply(c);
      }
      if (backend_->has_unfinished_requests()) {
        std::vector<RequestOutput> outputs = backend_->step();
        record_step();  // before the outputs go out: a scrape after a request ends sees its steps
        std::lock_guard live_lock(live_mutex_);
        dispatch(outputs);
      }
      publish_stats();
      log_stats();
    }
    // Shutting down: whatever is still running ends as aborted, so that its client gets an end.
    std::lock_guard live_lock(live_mutex_);
    std::vector<std::string> ids;
    for (auto& [id, live] : live_) ids.push_back(id);
    for (const std::string& id : ids) {
      Command c{Command::Kind::kAbort, {}, id};
      apply(c);
    }
    std::lock_guard lock(mutex_);
    for (Command& c : commands_) {
      if (c.kind == Command::Kind::kAdd) {
        c.submission.queue->push(
            {EngineEvent::Kind::kError,
             c.submission.tag,
             {},
             {EngineEventError::Kind::kUnavailable, "The server is shutting down"}});
        --num_in_flight_;
      }
    }
    commands_.clear();
    if (state_.load() != State::kDead) state_ = State::kStopped;
  } catch (const std::exception& e) {
    spdlog::error("the engine loop failed and stopped: {}", e.what());
    fail_all(e.what());
  }
}

void AsyncEngine::Impl::apply(Command& c) {
  switch (c.kind) {
    case Command::Kind::kAdd: {
      Submission& s = c.submission;
      // The server streams: each output carries only what is new (O(length) per request).
      s.params.output_kind = RequestOutputKind::kDelta;
      try {
        backend_->add_request(s.request_id, s.prompt_token_ids, s.params);
      } catch (const std::exception& e) {
        // A request the engine refuses (e.g. a token id outside the vocabulary) is the client's;
        // add_request validates before it changes any state, so the engine carries on.
        s.queue->push(
            {EngineEvent::Kind::kError, s.tag, {}, {EngineEventError::Kind::kRejected, e.what()}});
        --num_in_flight_;
        return;
      }
      Live live;
      live.queue = s.queue;
      live.tag = s.tag;
      live.num_prompt_tokens = static_cast<int64_t>(s.prompt_token_ids.size());
      live.n = s.params.n;
      live.max_tokens = s.params.max_tokens;
      live.prompt_token_ids = std::move(s.prompt_token_ids);
      live.sample_num_tokens.assign(static_cast<size_t>(s.params.n), 0);
      live.sample_finished.assign(static_cast<size_t>(s.params.n), false);
      live_.emplace(s.request_id, std::move(live));
      s.queue->push({EngineEvent::Kind::kAccepted, s.tag, {}, {}});
      return;
    }
    case Command::Kind::kAbort: {
      auto it = live_.find(c.request_id);
      if (it == live_.end()) return;  // already finished
      backend_->abort_request(c.request_id);
      Live& live = it->second;
      RequestOutput out;
      out.request_id = c.request_id;
      out.prompt_token_ids = std::move(live.prompt_token_ids);
      out.finished = true;
      out.outputs.resize(std::max<size_t>(1, live.sample_finished.size()));
      for (size_t i = 0; i < out.outputs.size(); ++i) {
        out.outputs[i].index = static_cast<int32_t>(i);
        if (i >= live.sample_finished.size() || !live.sample_finished[i])
          out.outputs[i].finish_reason = "abort";
      }
      finish(c.request_id, live, out);
      live_.erase(it);
      return;
    }
    case Command::Kind::kAbortAll: {
      std::vector<std::string> ids;
      for (auto& [id, live] : live_) ids.push_back(id);
      for (const std::string& id : ids) {
        Command one{Command::Kind::kAbort, {}, id};
        apply(one);
      }
      return;
    }
  }
}

void AsyncEngine::Impl::dispatch(std::vector<RequestOutput>& outputs) {
  for (RequestOutput& out : outputs) {
    auto it = live_.find(out.request_id);
    if (it == live_.end()) continue;  // aborted by us a moment ago
    Live& live = it->second;
    if (!out.prompt_token_ids.empty()) live.prompt_token_ids.clear();  // the job has them now
    int64_t num_new = 0;
    for (const CompletionOutput& o : out.outputs) {
      const auto i = static_cast<size_t>(o.index);
      if (i >= live.sample_num_tokens.size()) continue;
      live.sample_num_tokens[i] += static_cast<int64_t>(o.token_ids.size());
      if (o.finished()) live.sample_finished[i] = true;
      num_new += static_cast<int64_t>(o.token_ids.size());
    }
    const int64_t num_tokens = live.num_tokens_seen + num_new;
    if (num_new > 0) {
      // Inter-token latency: the gap since the previous token, spread over the tokens this step
      // added; the first token's latency is TTFT instead.
      if (live.num_tokens_seen > 0 && observer_) {
        observer_->on_inter_token_latency(
            (out.metrics.last_token_time_s - live.last_token_time_s) / static_cast<double>(num_new),
            num_new);
      }
      live.num_tokens_seen = num_tokens;
      live.last_token_time_s = out.metrics.last_token_time_s;
    }
    if (out.finished) {
      finish(out.request_id, live, out);
      live_.erase(it);
    } else {
      live.queue->push({EngineEvent::Kind::kOutput, live.tag, std::move(out), {}});
    }
  }
}

void AsyncEngine::Impl::finish(const std::string& request_id, Live& live,
                               const RequestOutput& output) {
  const RequestMetrics& m = output.metrics;
  FinishedRequest f;
  f.finish_reason = output.outputs.empty() ? "abort" : output.outputs.front().finish_reason;
  f.num_prompt_tokens = live.num_prompt_tokens;
  f.n = live.n;
  f.max_tokens = live.max_tokens;
  for (const int64_t num_tokens : live.sample_num_tokens) {
    f.num_generation_tokens += num_tokens;
    f.max_num_generation_tokens = std::max(f.max_num_generation_tokens, num_tokens);
  }
  const double end_s = m.finished_time_s > 0 ? m.finished_time_s : steady_seconds();
  f.queue_time_s = m.first_scheduled_time_s > 0 ? m.first_scheduled_time_s - m.arrival_time_s
                                                : end_s - m.arrival_time_s;
  f.ttft_s = m.first_token_time_s > 0 ? m.first_token_time_s - m.arrival_time_s : -1;
  f.e2e_s = m.arrival_time_s > 0 ? end_s - m.arrival_time_s : 0;
  if (m.first_scheduled_time_s > 0 && m.first_token_time_s > 0) {
    f.prefill_time_s = std::max(0.0, m.first_token_time_s - m.first_scheduled_time_s);
    const double last_token_s = std::max(m.last_token_time_s, m.first_token_time_s);
    f.decode_time_s = last_token_s - m.first_token_time_s;
    f.inference_time_s = last_token_s - m.first_scheduled_time_s;
  }
  if (observer_) observer_->on_finished(f);
  if (options_.log_requests) {
    spdlog::info(
        "request {} finished: prompt_tokens={} output_tokens={} queue_time={:.3f}s ttft={:.3f}s "
        "total_time={:.3f}s finish_reason={}",
        request_id, f.num_prompt_tokens, f.num_generation_tokens, f.queue_time_s,
        std::max(f.ttft_s, 0.0), f.e2e_s, f.finish_reason);
  }
  live.queue->push({EngineEvent::Kind::kOutput, live.tag, output, {}});
  --num_in_flight_;
}

void AsyncEngine::Impl::fail_all(const std::string& reason) {
  end_everything({EngineEventError::Kind::kFailed, "The engine failed: " + reason}, reason);
}

void AsyncEngine::Impl::fail_now(const std::string& reason) {
  end_everything({EngineEventError::Kind::kUnavailable, reason}, reason);
}

void AsyncEngine::Impl::end_everything(const EngineEventError& err, const std::string& reason) {
  std::lock_guard live_lock(live_mutex_);
  std::lock_guard lock(mutex_);
  if (state_.load() == State::kDead) return;  // the other of fail_all/fail_now came first
  failure_ = reason;
  // Dead before any client hears of it: a client that gets its error and asks /health next, or
  // sends a new request, must see 503.
  state_ = State::kDead;
  // live_ empty from now on: outputs of a step that does return find no request to go to.
  for (auto& [id, live] : live_) {
    live.queue->push({EngineEvent::Kind::kError, live.tag, {}, err});
    --num_in_flight_;
  }
  live_.clear();
  for (Command& c : commands_) {
    if (c.kind == Command::Kind::kAdd) {
      c.submission.queue->push({EngineEvent::Kind::kError, c.submission.tag, {}, err});
      --num_in_flight_;
    }
  }
  commands_.clear();
  cv_.notify_all();
}

AsyncEngine::AsyncEngine(Factory factory, AsyncEngineOptions options)
    : impl_(std::make_unique<Impl>(std::move(factory), std::move(options))) {}

AsyncEngine::~AsyncEngine() = default;

void AsyncEngine::start() {
  impl_->start();
}

void AsyncEngine::stop() {
  impl_->stop();
}

AsyncEngine::State AsyncEngine::state() const {
  return impl_->state_.load();
}

std::string AsyncEngine::failure() const {
  return impl_->failure();
}

const EngineBackend* AsyncEngine::backend() const {
  return impl_->backend();
}

void AsyncEngine::submit(Submission submission) {
  impl_->submit(std::move(submission));
}

void AsyncEngine::abort(const std::string& request_id) {
  impl_->abort(request_id);
}

void AsyncEngine::abort_all() {
  impl_->abort_all();
}

void AsyncEngine::begin_drain() {
  impl_->begin_drain();
}

void AsyncEngine::fail_now(const std::string& reason) {
  impl_->fail_now(reason);
}

int64_t AsyncEngine::num_in_flight() const {
  return impl_->num_in_flight_.load();
}

EngineStats AsyncEngine::stats() const {
  return impl_->stats();
}

bool AsyncEngine::wait_ready(std::chrono::milliseconds timeout) const {
  return impl_->wait_ready(timeout);
}

}  // namespace pagoda
