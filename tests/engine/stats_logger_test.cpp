// The periodic stats line: throughput over each interval from injected snapshots and times, a
// line while busy, one more as the work stops, then silence.
#include "engine/stats_logger.h"

#include <gtest/gtest.h>

namespace pagoda {
namespace {

EngineStats snapshot(int64_t prompt_tokens, int64_t generation_tokens, int32_t running,
                     int32_t waiting) {
  EngineStats s;
  s.prompt_tokens_computed = prompt_tokens;
  s.generation_tokens = generation_tokens;
  s.num_running = running;
  s.num_waiting = waiting;
  s.kv_cache_usage = 0.125;
  s.prefix_cache_queries = 200;
  s.prefix_cache_hits = 50;
  return s;
}

TEST(StatsLogger, OneLinePerIntervalWithThroughput) {
  StatsLogger logger(10.0);
  EXPECT_FALSE(logger.update(snapshot(0, 0, 0, 0), 100.0));
  EXPECT_FALSE(logger.update(snapshot(500, 20, 2, 1), 105.0));  // interval not over
  const std::optional<std::string> line = logger.update(snapshot(1000, 400, 3, 1), 110.0);
  ASSERT_TRUE(line);
  EXPECT_EQ(*line,
            "Avg prompt throughput: 100.0 tokens/s, Avg generation throughput: 40.0 tokens/s, "
            "Running: 3 reqs, Waiting: 1 reqs, KV cache usage: 12.5%, Prefix cache hit rate: "
            "25.0%");
  // The next interval measures from this line on, not from the start.
  EXPECT_FALSE(logger.update(snapshot(1000, 500, 3, 0), 115.0));
  const std::optional<std::string> next = logger.update(snapshot(1000, 650, 1, 0), 122.5);
  ASSERT_TRUE(next);
  EXPECT_NE(next->find("Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 20.0 "
                       "tokens/s, Running: 1 reqs, Waiting: 0 reqs"),
            std::string::npos)
      << *next;
}

TEST(StatsLogger, QuietWhenIdleAfterOneClosingLine) {
  StatsLogger logger(10.0);
  EXPECT_FALSE(logger.update(snapshot(0, 0, 0, 0), 0.0));
  EXPECT_FALSE(logger.update(snapshot(0, 0, 0, 0), 10.0));   // idle from the start: no line
  EXPECT_TRUE(logger.update(snapshot(10, 10, 0, 0), 20.0));  // work done in the interval
  const std::optional<std::string> closing = logger.update(snapshot(10, 10, 0, 0), 30.0);
  ASSERT_TRUE(closing);  // the throughput falling to zero is shown once
  EXPECT_NE(closing->find("Avg generation throughput: 0.0 tokens/s"), std::string::npos);
  EXPECT_FALSE(logger.update(snapshot(10, 10, 0, 0), 40.0));
  EXPECT_FALSE(logger.update(snapshot(10, 10, 0, 0), 50.0));
}

TEST(StatsLogger, WaitingRequestsCountAsBusy) {
  StatsLogger logger(10.0);
  logger.update(snapshot(0, 0, 0, 0), 0.0);
  // Nothing ran (e.g. the KV cache is full) but requests wait: worth a line.
  EXPECT_TRUE(logger.update(snapshot(0, 0, 0, 4), 10.0));
}

}  // namespace
}  // namespace pagoda
