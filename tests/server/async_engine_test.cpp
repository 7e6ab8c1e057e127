// The streaming client's reports to the server's metrics: each step's token count reaches
// vllm:iteration_tokens_total, a finished request its phase and parameter histograms, and
// /metrics has something to say in every state, including after a failed load.
#include "pagoda/async_engine.h"

#include <gtest/gtest.h>

#include <chrono>
#include <sstream>
#include <stdexcept>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "fake_engine.h"
#include "server/engine_metrics.h"

namespace pagoda::server::testing {
namespace {

using namespace std::chrono_literals;

double sample(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(prefix + " ", 0) == 0) return std::stod(line.substr(prefix.size() + 1));
  }
  return -1;
}

// Routes the default logger into a string for the lifetime of the object.
class CapturedLog {
 public:
  CapturedLog() : previous_(spdlog::default_logger()) {
    auto logger = std::make_shared<spdlog::logger>(
        "captured", std::make_shared<spdlog::sinks::ostream_sink_mt>(stream_));
    logger->set_level(spdlog::level::info);
    spdlog::set_default_logger(logger);
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }
  std::string text() {
    spdlog::default_logger()->flush();
    return stream_.str();
  }

 private:
  std::shared_ptr<spdlog::logger> previous_;
  std::ostringstream stream_;
};

// Submits one request and waits for its end.
void run_one(AsyncEngine& engine, int max_tokens, int n) {
  auto queue = std::make_shared<OutputQueue>();
  Submission s;
  s.request_id = "r1";
  s.prompt_token_ids = {1, 5, 6};
  s.params.max_tokens = max_tokens;
  s.params.n = n;
  s.params.ignore_eos = true;
  s.queue = queue;
  engine.submit(std::move(s));
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  std::vector<EngineEvent> events;
  while (std::chrono::steady_clock::now() < deadline) {
    events.clear();
    queue->pop_all(events, 100ms);
    for (const EngineEvent& e : events) {
      ASSERT_NE(e.kind, EngineEvent::Kind::kError) << e.error.message;
      if (e.kind == EngineEvent::Kind::kOutput && e.output.finished) return;
    }
  }
  FAIL() << "the request did not finish";
}

TEST(AsyncEngineMetrics, StepsAndFinishedRequestsReachTheHistograms) {
  auto metrics = std::make_shared<EngineMetrics>();
  AsyncEngine engine([] { return std::make_unique<FakeEngine>(FakeEngine::Options{}); },
                     {.observer = metrics});
  engine.start();
  ASSERT_TRUE(engine.wait_ready(10s));
  run_one(engine, 6, 2);
  const std::string text = metrics->render(engine);
  const std::string l = "{model_name=\"fake-model\"";
  // The fake computes one token per running request per step: six steps of one token.
  EXPECT_EQ(sample(text, "vllm:iteration_tokens_total_count" + l + "}"), 6) << text;
  EXPECT_EQ(sample(text, "vllm:iteration_tokens_total_sum" + l + "}"), 6);
  EXPECT_EQ(sample(text, "vllm:request_params_n_bucket" + l + ",le=\"2\"}"), 1);
  EXPECT_EQ(sample(text, "vllm:request_params_n_bucket" + l + ",le=\"1\"}"), 0);
  EXPECT_EQ(sample(text, "vllm:request_params_max_tokens_bucket" + l + ",le=\"5\"}"), 0);
  EXPECT_EQ(sample(text, "vllm:request_params_max_tokens_bucket" + l + ",le=\"10\"}"), 1);
  EXPECT_EQ(sample(text, "vllm:request_max_num_generation_tokens_sum" + l + "}"), 6);
  EXPECT_EQ(sample(text, "vllm:request_generation_tokens_sum" + l + "}"), 12);
  EXPECT_EQ(sample(text, "vllm:request_prefill_time_seconds_count" + l + "}"), 1);
  EXPECT_EQ(sample(text, "vllm:request_decode_time_seconds_count" + l + "}"), 1);
  EXPECT_EQ(sample(text, "vllm:request_inference_time_seconds_count" + l + "}"), 1);
  // Decode runs five 2 ms steps after the first token; inference covers prefill and decode.
  EXPECT_GT(sample(text, "vllm:request_decode_time_seconds_sum" + l + "}"), 0.005);
  EXPECT_GE(sample(text, "vllm:request_inference_time_seconds_sum" + l + "}"),
            sample(text, "vllm:request_decode_time_seconds_sum" + l + "}"));
  EXPECT_GT(sample(text, "process_resident_memory_bytes"), 0);
  engine.stop();
}

// The stats line comes from the engine loop while it works, and not with --disable-log-stats.
TEST(AsyncEngineStats, LogsAStatsLineWhileBusyUnlessDisabled) {
  for (const bool enabled : {true, false}) {
    CapturedLog log;
    AsyncEngineOptions options;
    options.log_stats = enabled;
    options.stats_interval_s = 0.02;
    AsyncEngine engine([] { return std::make_unique<FakeEngine>(FakeEngine::Options{}); }, options);
    engine.start();
    ASSERT_TRUE(engine.wait_ready(10s));
    run_one(engine, 40, 1);  // 40 steps of 2 ms: two intervals at least
    std::this_thread::sleep_for(100ms);
    engine.stop();
    const std::string text = log.text();
    EXPECT_EQ(text.find("Avg generation throughput: ") != std::string::npos, enabled) << text;
    if (!enabled) continue;
    // The first interval starts at load, so the prompt computed in the first step counts.
    const size_t first = text.find("Avg prompt throughput: ");
    ASSERT_NE(first, std::string::npos) << text;
    EXPECT_NE(text.compare(first, 27, "Avg prompt throughput: 0.0 "), 0) << text;
  }
}

TEST(AsyncEngineMetrics, AFailedLoadStillRendersTheProcessSeries) {
  auto metrics = std::make_shared<EngineMetrics>();
  AsyncEngine engine([]() -> std::unique_ptr<EngineBackend> { throw std::runtime_error("boom"); },
                     {.observer = metrics});
  engine.start();
  EXPECT_FALSE(engine.wait_ready(10s));
  ASSERT_EQ(engine.state(), AsyncEngine::State::kDead);
  const std::string text = metrics->render(engine);
  EXPECT_GT(sample(text, "process_resident_memory_bytes"), 0);
  EXPECT_GT(sample(text, "process_start_time_seconds"), 0);
  EXPECT_EQ(text.find("vllm:"), std::string::npos);
  engine.stop();
}

TEST(AsyncEngineMetrics, RendersWhileLoading) {
  std::atomic<bool> release{false};
  auto metrics = std::make_shared<EngineMetrics>();
  AsyncEngine engine(
      [&] {
        while (!release.load()) std::this_thread::sleep_for(1ms);
        return std::make_unique<FakeEngine>(FakeEngine::Options{});
      },
      {.observer = metrics});
  engine.start();
  const std::string loading = metrics->render(engine);
  EXPECT_GT(sample(loading, "process_open_fds"), 0);
  EXPECT_EQ(loading.find("vllm:"), std::string::npos);
  release = true;
  ASSERT_TRUE(engine.wait_ready(10s));
  EXPECT_NE(metrics->render(engine).find("vllm:num_requests_running"), std::string::npos);
  engine.stop();
}

}  // namespace
}  // namespace pagoda::server::testing
