// Pagoda's streaming client (vLLM's AsyncLLM / EngineClient): one engine thread owns the engine
// and runs add → step → dispatch (DESIGN principle 9); any other thread submits requests, aborts
// them and reads each request's OutputQueue. Outputs are deltas (RequestOutputKind::kDelta), so
// a stream costs O(length). The engine is constructed on the engine thread, so a caller can
// answer "loading" while the model loads, and an exception escaping a step marks the engine dead
// (every open stream gets an error) instead of taking the process down.
//
//   pagoda::AsyncEngine engine([&] { return pagoda::make_engine_backend(args); }, {});
//   engine.start();
//   auto queue = std::make_shared<pagoda::OutputQueue>();
//   engine.submit({"r1", engine.backend()->encode("Hello", true), params, 0, queue});
//   // queue->pop_all(...) until an kOutput event whose output.finished is true
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "pagoda/engine.h"
#include "pagoda/error.h"
#include "pagoda/export.h"

namespace pagoda {

// What the streaming client needs of an engine. The engine-thread methods are called only from
// the engine thread; the tokenizer methods may be called from any thread (the tokenizer and chat
// template are immutable once loaded). make_engine_backend implements it over pagoda::Engine;
// tests implement it with deterministic doubles.
class PAGODA_API EngineBackend {
 public:
  virtual ~EngineBackend() = default;
  // Engine thread only.
  virtual void add_request(const std::string& request_id, std::vector<int32_t> prompt_token_ids,
                           const SamplingParams& params) = 0;
  virtual void abort_request(const std::string& request_id) = 0;
  // Called on the submitting thread before the request reaches the engine thread: work that would
  // otherwise stall every running request for one step (a new grammar's compile). Thread-safe.
  virtual void prepare_request(const SamplingParams& /*params*/) {}
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

// The backend over a pagoda::Engine built from `args` (loads the model: call it on the engine
// thread, i.e. from the AsyncEngine's factory).
PAGODA_API std::unique_ptr<EngineBackend> make_engine_backend(const EngineArgs& args);

// Thrown by AsyncEngine::submit when the engine takes no requests now: loading, draining,
// stopped, dead, or too many requests waiting. Retrying later may succeed (HTTP 503).
class PAGODA_API EngineUnavailableError : public Error {
 public:
  using Error::Error;
};

// Why a request ended without a (further) output.
struct EngineEventError {
  enum class Kind {
    kRejected,     // the engine refused the request (e.g. a token id outside the vocabulary)
    kUnavailable,  // the engine stopped before taking it
    kFailed,       // the engine loop failed; the engine is dead
  };
  Kind kind = Kind::kRejected;
  std::string message;
};

// One event for a submitted request: accepted or rejected, or progress.
struct EngineEvent {
  enum class Kind { kAccepted, kOutput, kError };
  Kind kind = Kind::kOutput;
  int tag = 0;  // the submission's tag (e.g. which of a client's prompts)
  // kOutput: what this step added (text, ids, logprobs; RequestOutputKind::kDelta), with the
  // prompt's ids and logprobs in a request's first output.
  RequestOutput output;
  EngineEventError error;  // kError
};

// The per-client mailbox the engine thread pushes into and one client thread drains. Several
// requests may share one queue; their events carry their tags.
class PAGODA_API OutputQueue {
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

// A finished request's counts and phase times, for metrics. Times follow vLLM: queue = scheduled
// - arrival, prefill = first token - scheduled, decode = last token - first token, inference =
// last token - scheduled; < 0 where a phase never began.
struct FinishedRequest {
  std::string finish_reason;  // "stop", "length", "abort"
  int64_t num_prompt_tokens = 0;
  int64_t num_generation_tokens = 0;      // over all n samples
  int64_t max_num_generation_tokens = 0;  // the longest of the n samples
  int64_t n = 1;                          // the request's n
  int64_t max_tokens = 0;                 // the request's max_tokens
  double queue_time_s = 0;
  double ttft_s = -1;  // < 0: no token was produced
  double e2e_s = 0;
  double prefill_time_s = -1;
  double decode_time_s = -1;
  double inference_time_s = -1;
};

// What the engine thread reports as it works, for a caller's metrics (the server's Prometheus
// histograms). Every method runs on the engine thread; keep them short.
class PAGODA_API AsyncEngineObserver {
 public:
  virtual ~AsyncEngineObserver() = default;
  // The backend loaded; called before the engine is ready.
  virtual void on_loaded(const EngineBackend& /*backend*/) {}
  // A step that ran a forward pass over `num_tokens` tokens (prefill and decode together).
  virtual void on_step(int64_t /*num_tokens*/) {}
  // The gap between a request's tokens, spread over the `num_tokens` a step added.
  virtual void on_inter_token_latency(double /*seconds*/, int64_t /*num_tokens*/) {}
  virtual void on_finished(const FinishedRequest& /*request*/) {}
};

struct AsyncEngineOptions {
  int max_waiting_requests = 1024;  // submits beyond this many queued requests are refused
  bool log_requests = true;         // one info line per finished request
  // A stats line every stats_interval_s while busy (vLLM's LoggingStatLogger); false: none.
  bool log_stats = true;
  double stats_interval_s = 10.0;
  std::shared_ptr<AsyncEngineObserver> observer;  // optional
};

struct Submission {
  std::string request_id;
  std::vector<int32_t> prompt_token_ids;
  SamplingParams params;  // output_kind is forced to kDelta
  int tag = 0;
  std::shared_ptr<OutputQueue> queue;
};

class PAGODA_API AsyncEngine {
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

  State state() const;
  std::string failure() const;  // why the engine died (kDead)
  // The loaded engine's tokenizer side, or null while loading or once dead.
  const EngineBackend* backend() const;

  // Queues a request. Throws EngineUnavailableError while loading, draining or dead, or when the
  // waiting queue is full. The queue then receives kAccepted or kError, then outputs; the last
  // output of a request has output.finished set.
  void submit(Submission submission);
  void abort(const std::string& request_id);
  void abort_all();
  void begin_drain();  // refuse new requests from now on (graceful shutdown)
  // Ends every request in flight at once with an kUnavailable error naming `reason` (a server
  // answers 503), refuses new ones, and marks the engine dead — from any thread, without waiting
  // for the engine thread, which may be blocked for good in a collective whose peer is gone
  // (under mpirun, a rank that died). The engine thread delivers nothing afterwards. A caller
  // that used it ends the process instead of stop(), whose join could wait forever.
  void fail_now(const std::string& reason);

  int64_t num_in_flight() const;
  EngineStats stats() const;  // as of the last step
  // Waits until `ready` or `timeout`; true when ready.
  bool wait_ready(std::chrono::milliseconds timeout) const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pagoda
