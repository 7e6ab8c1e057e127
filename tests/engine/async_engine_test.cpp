// The streaming client's contract, over a scripted backend: refusals while loading, a request
// the engine rejects, deltas that add up to the whole, an abort that still ends the stream, and
// fail_now() ending requests while the engine thread is stuck in a step.
#include "pagoda/async_engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <thread>

namespace pagoda {
namespace {

using namespace std::chrono_literals;

// One token per running request per step: prompt.back() + 1, + 2, ..., text "<id>"; a request
// finishes with "length" after max_tokens. An empty prompt is refused, as the engine refuses
// an invalid request before it changes any state. With a `gate`, a step waits while the gate is
// closed (as a collective waits for a peer), and says so in `waiting`.
struct StepGate {
  std::atomic<bool> closed{false};
  std::atomic<bool> waiting{false};
};

class ScriptedBackend final : public EngineBackend {
 public:
  explicit ScriptedBackend(StepGate* gate = nullptr) : gate_(gate) {}

  void add_request(const std::string& id, std::vector<int32_t> prompt,
                   const SamplingParams& params) override {
    if (prompt.empty()) throw Error("the prompt is empty");
    EXPECT_EQ(params.output_kind, RequestOutputKind::kDelta);
    running_[id] = {prompt.back(), params.max_tokens, 0};
  }
  void abort_request(const std::string& id) override { running_.erase(id); }
  std::vector<RequestOutput> step() override {
    std::this_thread::sleep_for(1ms);
    while (gate_ != nullptr && gate_->closed.load()) {
      gate_->waiting = true;
      std::this_thread::sleep_for(1ms);
    }
    std::vector<RequestOutput> outputs;
    for (auto it = running_.begin(); it != running_.end();) {
      Running& r = it->second;
      RequestOutput out;
      out.request_id = it->first;
      CompletionOutput& o = out.outputs.emplace_back();
      const int32_t id = r.last + 1 + r.num_generated++;
      o.token_ids = {id};
      o.text = "<" + std::to_string(id) + ">";
      out.finished = r.num_generated == r.max_tokens;
      if (out.finished) o.finish_reason = "length";
      const bool finished = out.finished;
      outputs.push_back(std::move(out));
      it = finished ? running_.erase(it) : std::next(it);
    }
    return outputs;
  }
  bool has_unfinished_requests() const override { return !running_.empty(); }
  EngineStats stats() const override { return {}; }
  std::vector<int32_t> encode(const std::string&, bool) const override { return {}; }
  std::string decode(const std::vector<int32_t>&, bool) const override { return {}; }
  std::string apply_chat_template(const std::string&, bool, const std::string&) const override {
    return {};
  }
  std::string model_name() const override { return "scripted"; }
  int32_t max_model_len() const override { return 64; }
  SamplingParams default_sampling_params() const override { return {}; }

 private:
  struct Running {
    int32_t last = 0;
    int32_t max_tokens = 0;
    int32_t num_generated = 0;
  };
  std::map<std::string, Running> running_;
  StepGate* gate_;
};

AsyncEngineOptions quiet() {
  AsyncEngineOptions o;
  o.log_requests = false;
  o.log_stats = false;
  return o;
}

// Every event of a queue until its request finished or failed (or 10 s passed).
std::vector<EngineEvent> drain(OutputQueue& queue) {
  std::vector<EngineEvent> all;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline) {
    const size_t before = all.size();
    queue.pop_all(all, 50ms);
    for (size_t i = before; i < all.size(); ++i) {
      if (all[i].kind == EngineEvent::Kind::kError) return all;
      if (all[i].kind == EngineEvent::Kind::kOutput && all[i].output.finished) return all;
    }
  }
  ADD_FAILURE() << "the request did not end";
  return all;
}

// A request stops counting as in flight just after its last event is pushed.
bool settles_to_zero_in_flight(const AsyncEngine& engine) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (engine.num_in_flight() != 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  return engine.num_in_flight() == 0;
}

TEST(AsyncEngine, RefusesWhileLoadingThenDeltasAddUpToTheWhole) {
  std::atomic<bool> release{false};
  AsyncEngine engine(
      [&] {
        while (!release.load()) std::this_thread::sleep_for(1ms);
        return std::make_unique<ScriptedBackend>();
      },
      quiet());
  engine.start();
  auto queue = std::make_shared<OutputQueue>();
  EXPECT_THROW(engine.submit({"early", {1}, {}, 0, queue}), EngineUnavailableError);
  EXPECT_EQ(engine.backend(), nullptr);
  release = true;
  ASSERT_TRUE(engine.wait_ready(10s));
  ASSERT_NE(engine.backend(), nullptr);

  SamplingParams params;
  params.max_tokens = 4;  // output_kind left cumulative: the client forces deltas
  engine.submit({"r", {10}, params, 7, queue});
  const std::vector<EngineEvent> events = drain(*queue);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.front().kind, EngineEvent::Kind::kAccepted);
  std::string text;
  std::vector<int32_t> ids;
  for (const EngineEvent& e : events) {
    EXPECT_EQ(e.tag, 7);
    if (e.kind != EngineEvent::Kind::kOutput) continue;
    text += e.output.outputs.front().text;
    const std::vector<int32_t>& d = e.output.outputs.front().token_ids;
    ids.insert(ids.end(), d.begin(), d.end());
  }
  EXPECT_EQ(text, "<11><12><13><14>");
  EXPECT_EQ(ids, (std::vector<int32_t>{11, 12, 13, 14}));
  EXPECT_EQ(events.back().output.outputs.front().finish_reason, "length");
  EXPECT_TRUE(settles_to_zero_in_flight(engine));
  engine.stop();
  EXPECT_EQ(engine.state(), AsyncEngine::State::kStopped);
}

TEST(AsyncEngine, ARejectedRequestIsAnEventAndTheEngineCarriesOn) {
  AsyncEngine engine([] { return std::make_unique<ScriptedBackend>(); }, quiet());
  engine.start();
  ASSERT_TRUE(engine.wait_ready(10s));
  auto queue = std::make_shared<OutputQueue>();
  engine.submit({"bad", {}, {}, 0, queue});
  const std::vector<EngineEvent> events = drain(*queue);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, EngineEvent::Kind::kError);
  EXPECT_EQ(events[0].error.kind, EngineEventError::Kind::kRejected);
  EXPECT_EQ(events[0].error.message, "the prompt is empty");
  EXPECT_EQ(engine.state(), AsyncEngine::State::kReady);
  EXPECT_TRUE(settles_to_zero_in_flight(engine));
}

TEST(AsyncEngine, AnAbortedRequestEndsWithAbort) {
  AsyncEngine engine([] { return std::make_unique<ScriptedBackend>(); }, quiet());
  engine.start();
  ASSERT_TRUE(engine.wait_ready(10s));
  auto queue = std::make_shared<OutputQueue>();
  SamplingParams params;
  params.max_tokens = 1000000;  // ends only by the abort
  engine.submit({"long", {1, 2, 3}, params, 0, queue});
  engine.abort("long");
  const std::vector<EngineEvent> events = drain(*queue);
  ASSERT_FALSE(events.empty());
  const EngineEvent& last = events.back();
  ASSERT_EQ(last.kind, EngineEvent::Kind::kOutput);
  EXPECT_TRUE(last.output.finished);
  EXPECT_EQ(last.output.outputs.front().finish_reason, "abort");
  EXPECT_TRUE(settles_to_zero_in_flight(engine));
  engine.begin_drain();
  EXPECT_THROW(engine.submit({"late", {1}, {}, 0, queue}), EngineUnavailableError);
}

// Under mpirun a step can block for good on a rank that died: fail_now() must end the running
// request from another thread (503 for the server), refuse new ones, and keep whatever the
// step produces, if it ever returns, from reaching a client that already has its answer.
TEST(AsyncEngine, FailNowEndsRequestsWhileAStepIsStuck) {
  StepGate gate;
  AsyncEngine engine([&] { return std::make_unique<ScriptedBackend>(&gate); }, quiet());
  engine.start();
  ASSERT_TRUE(engine.wait_ready(10s));
  auto queue = std::make_shared<OutputQueue>();
  SamplingParams params;
  params.max_tokens = 1000000;
  engine.submit({"stuck", {1}, params, 3, queue});
  std::vector<EngineEvent> events;
  while (events.size() < 2) ASSERT_TRUE(queue->pop_all(events, 10s));  // accepted, a token
  gate.closed = true;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!gate.waiting.load() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(gate.waiting.load());
  events.clear();
  queue->pop_all(events, 0ms);  // what the steps before the gate delivered

  engine.fail_now("a rank is gone");
  events.clear();
  ASSERT_TRUE(queue->pop_all(events, 1s));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, EngineEvent::Kind::kError);
  EXPECT_EQ(events[0].tag, 3);
  EXPECT_EQ(events[0].error.kind, EngineEventError::Kind::kUnavailable);
  EXPECT_EQ(events[0].error.message, "a rank is gone");
  EXPECT_EQ(engine.num_in_flight(), 0);
  EXPECT_EQ(engine.state(), AsyncEngine::State::kDead);
  EXPECT_EQ(engine.failure(), "a rank is gone");
  EXPECT_THROW(engine.submit({"late", {1}, {}, 0, queue}), EngineUnavailableError);

  gate.closed = false;  // the step returns after all: its output has nowhere to go
  std::this_thread::sleep_for(50ms);
  events.clear();
  EXPECT_FALSE(queue->pop_all(events, 0ms)) << events.size() << " events after fail_now";
  engine.stop();
}

}  // namespace
}  // namespace pagoda
