// Prometheus rendering: vLLM's names with the model_name label, cumulative histogram buckets,
// escaping, and process stats read from /proc.
#include "server/metrics.h"

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <ctime>
#include <fstream>
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
  s.spec_num_drafts = 5;
  s.spec_num_draft_tokens = 20;
  s.spec_num_accepted_tokens = 7;
  s.spec_num_accepted_tokens_per_pos = {4, 2, 1, 0};
  s.decode_experts = {10, 10, 260, 1560};
  s.verify_experts = {5, 25, 130, 2340};
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
  EXPECT_EQ(sample(text, "vllm:spec_decode_num_drafts_total" + label + "}"), 5);
  EXPECT_EQ(sample(text, "vllm:spec_decode_num_draft_tokens_total" + label + "}"), 20);
  EXPECT_EQ(sample(text, "vllm:spec_decode_num_accepted_tokens_total" + label + "}"), 7);
  EXPECT_EQ(sample(text, "vllm:spec_decode_num_accepted_tokens_per_pos_total" + label +
                             ",position=\"1\"}"),
            2);
  EXPECT_EQ(sample(text, "pagoda_moe_layer_passes_total" + label + ",step=\"decode\"}"), 260);
  EXPECT_EQ(sample(text, "pagoda_moe_routed_experts_total" + label + ",step=\"decode\"}"), 1560);
  EXPECT_EQ(sample(text, "pagoda_moe_layer_passes_total" + label + ",step=\"verify\"}"), 130);
  EXPECT_EQ(sample(text, "pagoda_moe_routed_experts_total" + label + ",step=\"verify\"}"), 2340);
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

// The series vLLM has and Pagoda lacked (issue 21): names, types, buckets and what one finished
// request and two steps put into them.
TEST(Metrics, RendersVllmRequestPhaseAndParamsHistograms) {
  CacheInfo cache;
  cache.block_size = 16;
  cache.num_blocks = 512;
  cache.num_bytes = 1 << 24;
  cache.dtype = "f16";
  cache.enable_prefix_caching = true;
  Metrics m("m", 2048, cache);
  FinishedRequest r;
  r.finish_reason = "stop";
  r.num_prompt_tokens = 10;
  r.num_generation_tokens = 30;
  r.max_num_generation_tokens = 12;
  r.n = 3;
  r.max_tokens = 100;
  r.queue_time_s = 0.1;
  r.ttft_s = 0.4;
  r.e2e_s = 2.0;
  r.prefill_time_s = 0.3;
  r.decode_time_s = 1.6;
  r.inference_time_s = 1.9;
  m.record_finished(r);
  m.record_step(1);
  m.record_step(600);
  const std::string text = m.render(EngineStats{}, ProcessStats{});
  const std::string l = "{model_name=\"m\"";
  EXPECT_NE(text.find("# TYPE vllm:iteration_tokens_total histogram\n"), std::string::npos);
  EXPECT_EQ(sample(text, "vllm:iteration_tokens_total_bucket" + l + ",le=\"1\"}"), 1);
  EXPECT_EQ(sample(text, "vllm:iteration_tokens_total_bucket" + l + ",le=\"512\"}"), 1);
  EXPECT_EQ(sample(text, "vllm:iteration_tokens_total_bucket" + l + ",le=\"1024\"}"), 2);
  EXPECT_EQ(sample(text, "vllm:iteration_tokens_total_bucket" + l + ",le=\"16384\"}"), 2);
  EXPECT_EQ(sample(text, "vllm:iteration_tokens_total_sum" + l + "}"), 601);
  EXPECT_EQ(sample(text, "vllm:request_prefill_time_seconds_bucket" + l + ",le=\"0.3\"}"), 1);
  EXPECT_EQ(sample(text, "vllm:request_decode_time_seconds_bucket" + l + ",le=\"1.5\"}"), 0);
  EXPECT_EQ(sample(text, "vllm:request_decode_time_seconds_bucket" + l + ",le=\"2\"}"), 1);
  EXPECT_DOUBLE_EQ(sample(text, "vllm:request_inference_time_seconds_sum" + l + "}"), 1.9);
  EXPECT_EQ(sample(text, "vllm:request_queue_time_seconds_count" + l + "}"), 1);
  EXPECT_EQ(sample(text, "vllm:request_max_num_generation_tokens_bucket" + l + ",le=\"10\"}"), 0);
  EXPECT_EQ(sample(text, "vllm:request_max_num_generation_tokens_bucket" + l + ",le=\"20\"}"), 1);
  EXPECT_EQ(sample(text, "vllm:request_max_num_generation_tokens_bucket" + l + ",le=\"2000\"}"), 1);
  EXPECT_EQ(sample(text, "vllm:request_params_n_bucket" + l + ",le=\"2\"}"), 0);
  EXPECT_EQ(sample(text, "vllm:request_params_n_bucket" + l + ",le=\"5\"}"), 1);
  EXPECT_EQ(sample(text, "vllm:request_params_n_bucket" + l + ",le=\"20\"}"), 1);
  EXPECT_EQ(sample(text, "vllm:request_params_max_tokens_bucket" + l + ",le=\"100\"}"), 1);
  EXPECT_EQ(sample(text, "vllm:request_params_max_tokens_bucket" + l + ",le=\"50\"}"), 0);
  EXPECT_EQ(sample(text,
                   "vllm:cache_config_info{block_size=\"16\",cache_dtype=\"f16\","
                   "cpu_kvcache_space_bytes=\"16777216\",enable_prefix_caching=\"True\","
                   "engine=\"0\",num_gpu_blocks=\"512\"}"),
            1);
  EXPECT_NE(text.find("# TYPE vllm:cache_config_info gauge\n"), std::string::npos);
}

// A request that never got a token has no prefill or decode phase to observe.
TEST(Metrics, PhasesThatNeverBeganAreNotObserved) {
  Metrics m("m", 64);
  FinishedRequest r;
  r.finish_reason = "abort";
  r.queue_time_s = 1.0;
  r.e2e_s = 1.0;
  m.record_finished(r);
  const std::string text = m.render(EngineStats{}, ProcessStats{});
  EXPECT_EQ(sample(text, "vllm:request_queue_time_seconds_count{model_name=\"m\"}"), 1);
  EXPECT_EQ(sample(text, "vllm:request_prefill_time_seconds_count{model_name=\"m\"}"), 0);
  EXPECT_EQ(sample(text, "vllm:request_decode_time_seconds_count{model_name=\"m\"}"), 0);
  EXPECT_EQ(sample(text, "vllm:request_inference_time_seconds_count{model_name=\"m\"}"), 0);
}

// prometheus_client's process collector: the same six series, no labels.
TEST(Metrics, RendersProcessSeriesAsPrometheusClient) {
  ProcessStats p;
  p.virtual_memory_bytes = 1000;
  p.resident_memory_bytes = 500;
  p.start_time_seconds = 1700000000.5;
  p.cpu_seconds = 2.25;
  p.open_fds = 7;
  p.max_fds = 1024;
  for (const std::string& text :
       {Metrics("m", 16).render(EngineStats{}, p), render_process_metrics(p)}) {
    EXPECT_EQ(sample(text, "process_virtual_memory_bytes"), 1000);
    EXPECT_EQ(sample(text, "process_resident_memory_bytes"), 500);
    EXPECT_EQ(sample(text, "process_start_time_seconds"), 1700000000.5);
    EXPECT_EQ(sample(text, "process_cpu_seconds_total"), 2.25);
    EXPECT_EQ(sample(text, "process_open_fds"), 7);
    EXPECT_EQ(sample(text, "process_max_fds"), 1024);
    EXPECT_NE(text.find("# TYPE process_cpu_seconds_total counter\n"), std::string::npos);
    EXPECT_NE(text.find("# TYPE process_open_fds gauge\n"), std::string::npos);
  }
  EXPECT_EQ(render_process_metrics(p).find("vllm:"), std::string::npos);
}

// Runs promtool on `text`; "" when it parses and the only lint is about vLLM's own names: ':' in
// them, and "_total" on vllm:iteration_tokens_total, a histogram (vLLM's name is the contract).
std::string promtool_problems(const std::string& text) {
  const std::string path = ::testing::TempDir() + "/pagoda_metrics_unit.txt";
  { std::ofstream(path) << text; }
  const std::string report_path = path + ".report";
  const int status =
      std::system(("promtool check metrics < " + path + " > " + report_path + " 2>&1").c_str());
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(report_path);
  std::string line, problems;
  if (rc != 0 && rc != 3) problems = "promtool exit " + std::to_string(rc) + "\n";
  while (std::getline(in, line)) {
    const bool colon = line.rfind("vllm:", 0) == 0 &&
                       line.find("metric names should not contain ':'") != std::string::npos;
    const bool iteration = line ==
                           "vllm:iteration_tokens_total non-counter metrics should not "
                           "have \"_total\" suffix";
    if (!line.empty() && !colon && !iteration) problems += line + "\n";
  }
  return problems;
}

TEST(Metrics, EverySeriesPassesPromtool) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "promtool not installed";
  Metrics m("m", 256, CacheInfo{16, 8, 4096, "f16", true});
  FinishedRequest r;
  r.finish_reason = "length";
  r.ttft_s = 0.1;
  r.prefill_time_s = 0.1;
  r.decode_time_s = 0.2;
  r.inference_time_s = 0.3;
  m.record_finished(r);
  m.record_step(4);
  EXPECT_EQ(promtool_problems(m.render(EngineStats{}, read_process_stats())), "");
  EXPECT_EQ(promtool_problems(render_process_metrics(read_process_stats())), "");
  EXPECT_NE(promtool_problems("vllm:broken{\n"), "");  // the check can fail
}

TEST(ProcessStats, ReadsProc) {
  const ProcessStats s = read_process_stats();
  EXPECT_GT(s.resident_memory_bytes, 1 << 20);
  EXPECT_GE(s.virtual_memory_bytes, s.resident_memory_bytes);
  EXPECT_GE(s.open_fds, 3);  // stdin, stdout, stderr
  EXPECT_GE(s.max_fds, s.open_fds);
  // Started in the last day, by the wall clock.
  const double now = static_cast<double>(std::time(nullptr));
  EXPECT_LE(s.start_time_seconds, now + 1);
  EXPECT_GT(s.start_time_seconds, now - 86400);
  volatile double x = 0;
  for (int i = 0; i < 20000000; ++i) x = x + i * 0.5;
  EXPECT_GT(read_process_stats().cpu_seconds, 0.0);
}

}  // namespace
}  // namespace pagoda::server
