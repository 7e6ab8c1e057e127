// The bridge between HTTP threads and the single-threaded engine (DESIGN principle 9): one
// engine thread owns the Engine and runs add → step → dispatch; HTTP threads only enqueue
// commands (submit, abort) and read their request's OutputQueue. The engine is constructed on
// the engine thread, so the server answers /health with 503 while the model loads, and an
// exception escaping a step marks the engine dead (every open stream gets an error) instead of
// taking the process down.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "pagoda/engine.h"
#include "server/metrics.h"
#include "server/openai_protocol.h"
#include "server/stats_logger.h"

namespace pagoda::server {

// What the server needs of an engine. The engine-thread methods are called only from the
// engine thread; the tokenizer methods may be called from any thread (the tokenizer and chat
// template are immutable once loaded). Implemented over pagoda::Engine by make_engine_backend,
// and by test doubles in tests/server.
class EngineBackend {
 public:
  virtual ~EngineBackend() = default;
  // Engine thread only.
  virtual void add_request(const std::string& request_id, std::vector<int32_t> prompt_token_ids,
                           const SamplingParams& params) = 0;
  virtual void abort_request(const std::string& request_id) = 0;
  virtual std::vector<RequestOutput> step() = 0;
  virtual bool has_unfinished_requests() const = 0;
  virtual EngineStats stats() const = 0;
  // Any thread.
  virtual CacheInfo cache_info() const { return {}; }
  virtual std::vector<int32_t> encode(const std::string& text, bool add_special_tokens) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const = 0;
  virtual std::string apply_chat_template(const std::string& messages_json,
                                          bool add_generation_prompt,
                                          const std::string& kwargs_json) const = 0;
  virtual std::string model_name() const = 0;
  virtual int32_t max_model_len() const = 0;
  virtual SamplingParams default_sampling_params() const = 0;
};

std::unique_ptr<EngineBackend> make_engine_backend(const EngineArgs& args);

// One event for an HTTP request: its engine request was accepted or rejected, or made progress.
struct EngineEvent {
  enum class Kind { kAccepted, kOutput, kError };
  Kind kind = Kind::kOutput;
  int tag = 0;  // which of the HTTP request's engine requests (one per prompt)
  // kOutput: what this step added (text, ids, logprobs; RequestOutputKind::kDelta), with the
  // prompt's ids and logprobs in a request's first output.
  RequestOutput output;
  ApiError error;  // kError
};

// The per-HTTP-request mailbox the engine thread pushes into and one HTTP thread drains.
class OutputQueue {
 public:
  // Called after every push, on the pushing thread, outside the queue's lock: how an event-driven
  // reader learns there is something to pop. Set it before the first submit; clear it (set an
  // empty function) to let go of what it holds.
  void set_listener(std::function<void()> listener);
  void push(EngineEvent event);
  // Moves every queued event into `out`; waits up to `timeout` for the first. False if none came.
  bool pop_all(std::vector<EngineEvent>& out, std::chrono::milliseconds timeout);

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<EngineEvent> events_;
  std::function<void()> listener_;
};

struct AsyncEngineOptions {
  int max_waiting_requests = 1024;  // submits beyond this many queued requests get 503
  bool log_requests = true;         // one info line per finished request
  // A stats line every stats_interval_s while busy (StatsLogger); --disable-log-stats: false.
  bool log_stats = true;
  double stats_interval_s = 10.0;
};

struct Submission {
  std::string request_id;
  std::vector<int32_t> prompt_token_ids;
  SamplingParams params;
  int tag = 0;
  std::shared_ptr<OutputQueue> queue;
};

class AsyncEngine {
 public:
  using Factory = std::function<std::unique_ptr<EngineBackend>()>;
  enum class State { kLoading, kReady, kDraining, kDead, kStopped };

  AsyncEngine(Factory factory, AsyncEngineOptions options);
  ~AsyncEngine();
  AsyncEngine(const AsyncEngine&) = delete;
  AsyncEngine& operator=(const AsyncEngine&) = delete;

  void start();  // loads the engine on the engine thread
  // Stops the loop; requests still running are aborted (their streams get finish_reason "abort").
  void stop();

  State state() const { return state_.load(); }
  std::string failure() const;  // why the engine died (kDead)
  // The loaded engine's tokenizer side, or null while loading or once dead.
  const EngineBackend* backend() const;
  Metrics* metrics() const { return metrics_.get(); }
  // The /metrics text in any state: everything once loaded (also after the engine died, with
  // its last stats), only the process_* series while loading or after a failed load.
  std::string render_metrics() const;

  // Queues a request. Throws RequestError 503 while loading, draining or dead, or when the
  // waiting queue is full. The queue then receives kAccepted or kError, then outputs.
  void submit(Submission submission);
  void abort(const std::string& request_id);
  void abort_all();
  void begin_drain();  // refuse new requests from now on (graceful shutdown)

  int64_t num_in_flight() const { return num_in_flight_.load(); }
  EngineStats stats() const;  // as of the last step
  // Waits until `ready` or `timeout`; true when ready.
  bool wait_ready(std::chrono::milliseconds timeout) const;

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
  void publish_stats();
  void record_step();  // the step's tokens into vllm:iteration_tokens_total
  void log_stats();    // the periodic stats line, when one is due

  Factory factory_;
  AsyncEngineOptions options_;
  std::unique_ptr<EngineBackend> backend_;
  std::unique_ptr<Metrics> metrics_;
  std::atomic<State> state_{State::kLoading};
  std::atomic<int64_t> num_in_flight_{0};

  mutable std::mutex mutex_;  // guards commands_, stop_, failure_, stats_
  mutable std::condition_variable cv_;
  std::vector<Command> commands_;
  bool stop_ = false;
  std::string failure_;
  EngineStats stats_;

  std::unordered_map<std::string, Live> live_;  // engine thread only
  StatsLogger stats_logger_;                    // engine thread only
  int64_t num_steps_recorded_ = 0;              // engine thread only
  std::thread thread_;
};

}  // namespace pagoda::server
