// Prometheus metrics for /metrics, in the text exposition format 0.0.4, with vLLM's metric names
// (vllm/v1/metrics/loggers.py) and a model_name label so existing vLLM Grafana dashboards work,
// plus pagoda_ gauges for process memory and CPU. Engine-wide counters come from an EngineStats
// snapshot; per-request latencies are recorded when a request finishes. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "pagoda/engine.h"

namespace pagoda::server {

// A cumulative histogram: counts[i] observations <= bounds[i], plus +Inf, sum and count.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  const std::vector<double>& bounds() const { return bounds_; }
  // Cumulative counts, one per bound, then +Inf.
  std::vector<uint64_t> cumulative_counts() const;
  double sum() const { return sum_; }
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> bucket_counts_;  // per bucket, not cumulative; last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// vLLM's 1-2-5 series up to max_value (build_1_2_5_buckets), for token counts.
std::vector<double> one_two_five_buckets(double max_value);

// Resident memory and CPU time of this process, read from /proc/self.
struct ProcessStats {
  int64_t resident_memory_bytes = 0;
  double cpu_seconds = 0;  // user + system
};
ProcessStats read_process_stats();

// What one finished request contributes to the histograms (seconds and token counts).
struct FinishedRequest {
  std::string finish_reason;  // "stop", "length", "abort"
  int64_t num_prompt_tokens = 0;
  int64_t num_generation_tokens = 0;
  double queue_time_s = 0;
  double ttft_s = -1;  // < 0: no token was produced
  double e2e_s = 0;
};

class Metrics {
 public:
  Metrics(std::string model_name, int32_t max_model_len);

  void record_finished(const FinishedRequest& request);
  void record_inter_token_latency(double seconds, int64_t num_tokens);
  // KV pool size known after load (EngineStats has the total).
  std::string render(const EngineStats& stats, const ProcessStats& process);

 private:
  std::string model_name_;
  std::mutex mutex_;
  Histogram ttft_, itl_, tpot_, e2e_, queue_, prompt_tokens_, generation_tokens_;
  std::map<std::string, int64_t> success_by_reason_;
  // CPU utilisation is the CPU time used since the previous scrape over the wall time elapsed.
  double last_cpu_seconds_ = -1;
  double last_wall_seconds_ = 0;
  double cpu_utilization_ = 0;
};

}  // namespace pagoda::server
