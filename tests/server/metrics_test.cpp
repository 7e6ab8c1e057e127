// Prometheus rendering: vLLM's names with the model_name label, cumulative histogram buckets,
// escaping, and process stats read from /proc.
#include "server/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>

namespace pagoda::server {
namespace {

// The value of the sample line that starts with `prefix` (name{labels}), or NaN.
double sample(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0 && line.size() > prefix.size() && line[prefix.size()] == ' ') {
      return std::stod(line.substr(prefix.size() + 1));
    }
  }
  return std::nan("");
}

TEST(Histogram, CumulativeBucketsWithUpperBoundsInclusive) {
  Histogram h({1.0, 2.0, 5.0});
  for (double v : {0.5, 1.0, 1.5, 5.0, 7.0}) h.observe(v);
  EXPECT_EQ(h.cumulative_counts(), (std::vector<uint64_t>{2, 3, 4, 5}));
  EXPECT_EQ(h.count(), 5u);
  EXPECT_DOUBLE_EQ(h.sum(), 15.0);
}

TEST(Histogram, OneTwoFiveBuckets) {
  EXPECT_EQ(one_two_five_buckets(100), (std::vector<double>{1, 2, 5, 10, 20, 50, 100}));
  EXPECT_EQ(one_two_five_buckets(4), (std::vector<double>{1, 2}));
}

TEST(Metrics, RendersVllmNamesWithModelLabel) {
  Metrics m("deepseek \"coder\"", 2048);
  FinishedRequest r;
  r.finish_reason = "length";
  r.num_prompt_tokens = 100;
  r.num_generation_tokens = 11;
  r.queue_time_s = 0.2;
  r.ttft_s = 0.5;
  r.e2e_s = 1.5;
  m.record_finished(r);
  m.record_inter_token_latency(0.1, 10);
  EngineStats s;
  s.num_running = 3;
  s.num_waiting = 4;
  s.kv_cache_usage = 0.25;
  s.kv_cache_total_bytes = 1000;
  s.prompt_tokens = 100;
  s.generation_tokens = 11;
  s.prefix_cache_queries = 64;
  s.prefix_cache_hits = 32;
  s.num_preemptions = 2;
  const std::string text = m.render(s, ProcessStats{123456, 1.5});
  const std::string label = "{model_name=\"deepseek \\\"coder\\\"\"";
  EXPECT_EQ(sample(text, "vllm:num_requests_running" + label + "}"), 3);
  EXPECT_EQ(sample(text, "vllm:num_requests_waiting" + label + "}"), 4);
  EXPECT_EQ(sample(text, "vllm:kv_cache_usage_perc" + label + "}"), 0.25);
  EXPECT_EQ(sample(text, "vllm:prompt_tokens_total" + label + "}"), 100);
  EXPECT_EQ(sample(text, "vllm:generation_tokens_total" + label + "}"), 11);
  EXPECT_EQ(sample(text, "vllm:num_preemptions_total" + label + "}"), 2);
  EXPECT_EQ(sample(text, "vllm:prefix_cache_queries_total" + label + "}"), 64);
  EXPECT_EQ(sample(text, "vllm:prefix_cache_hits_total" + label + "}"), 32);
  EXPECT_EQ(sample(text, "vllm:request_success_total" + label + ",finished_reason=\"length\"}"), 1);
  EXPECT_EQ(sample(text, "vllm:request_success_total" + label + ",finished_reason=\"stop\"}"), 0);
  EXPECT_EQ(sample(text, "vllm:time_to_first_token_seconds_bucket" + label + ",le=\"0.25\"}"), 0);
  EXPECT_EQ(sample(text, "vllm:time_to_first_token_seconds_bucket" + label + ",le=\"0.5\"}"), 1);
  EXPECT_EQ(sample(text, "vllm:time_to_first_token_seconds_bucket" + label + ",le=\"+Inf\"}"), 1);
  EXPECT_EQ(sample(text, "vllm:time_to_first_token_seconds_count" + label + "}"), 1);
  EXPECT_EQ(sample(text, "vllm:inter_token_latency_seconds_count" + label + "}"), 10);
  EXPECT_DOUBLE_EQ(sample(text, "vllm:time_per_output_token_seconds_sum" + label + "}"), 0.1);
  EXPECT_EQ(sample(text, "vllm:e2e_request_latency_seconds_bucket" + label + ",le=\"1.5\"}"), 1);
  EXPECT_EQ(sample(text, "vllm:request_queue_time_seconds_count" + label + "}"), 1);
  EXPECT_EQ(sample(text, "vllm:request_prompt_tokens_bucket" + label + ",le=\"100\"}"), 1);
  EXPECT_EQ(sample(text, "vllm:request_prompt_tokens_bucket" + label + ",le=\"50\"}"), 0);
  EXPECT_EQ(sample(text, "vllm:request_generation_tokens_sum" + label + "}"), 11);
  EXPECT_EQ(sample(text, "pagoda_resident_memory_bytes" + label + "}"), 123456);
  EXPECT_EQ(sample(text, "pagoda_kv_cache_used_bytes" + label + "}"), 250);
  EXPECT_EQ(sample(text, "pagoda_kv_cache_total_bytes" + label + "}"), 1000);
  EXPECT_NE(text.find("# TYPE vllm:time_to_first_token_seconds histogram\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE vllm:prompt_tokens_total counter\n"), std::string::npos);
  // Every line is a comment or a sample; no blank lines.
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) EXPECT_FALSE(line.empty());
}

TEST(Metrics, CpuUtilizationComesFromConsecutiveScrapes) {
  Metrics m("m", 16);
  m.render(EngineStats{}, ProcessStats{0, 0.0});
  const std::string text = m.render(EngineStats{}, ProcessStats{0, 1000.0});
  // 1000 CPU seconds in a few microseconds of wall time: clamped to all cores busy.
  EXPECT_EQ(sample(text, "pagoda_cpu_utilization_ratio{model_name=\"m\"}"), 1.0);
}

TEST(ProcessStats, ReadsProc) {
  const ProcessStats s = read_process_stats();
  EXPECT_GT(s.resident_memory_bytes, 1 << 20);
  volatile double x = 0;
  for (int i = 0; i < 20000000; ++i) x = x + i * 0.5;
  EXPECT_GT(read_process_stats().cpu_seconds, 0.0);
}

}  // namespace
}  // namespace pagoda::server
