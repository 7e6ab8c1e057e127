// Prometheus metrics for /metrics, in the text exposition format 0.0.4, with vLLM's metric names,
// types and buckets (vllm/v1/metrics/loggers.py) and a model_name label so existing vLLM Grafana
// dashboards work, the process_* series that Python's prometheus_client adds to every vLLM
// server, and pagoda_ gauges for memory and CPU. Engine-wide counters come from an EngineStats
// snapshot; per-step token counts are recorded after each step and per-request histograms when a
// request finishes. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "pagoda/async_engine.h"
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

// This process as prometheus_client's ProcessCollector reports it, read from /proc/self.
struct ProcessStats {
  int64_t resident_memory_bytes = 0;
  double cpu_seconds = 0;  // user + system
  int64_t virtual_memory_bytes = 0;
  double start_time_seconds = 0;  // Unix time
  int64_t open_fds = 0;
  int64_t max_fds = 0;  // the soft RLIMIT_NOFILE
};
ProcessStats read_process_stats();

// The process_* series alone: what /metrics can still say when the engine failed to load.
std::string render_process_metrics(const ProcessStats& process);

// What one finished request contributes to the histograms is pagoda::FinishedRequest
// (include/pagoda/async_engine.h), reported by the engine thread.

class Metrics {
 public:
  // `cache` fills vLLM's cache_config_info.
  Metrics(std::string model_name, int32_t max_model_len, CacheInfo cache = {});

  void record_finished(const FinishedRequest& request);
  void record_inter_token_latency(double seconds, int64_t num_tokens);
  // One engine step that computed `num_tokens` tokens (prefill and decode together).
  void record_step(int64_t num_tokens);
  // KV pool size known after load (EngineStats has the total).
  std::string render(const EngineStats& stats, const ProcessStats& process);

 private:
  std::string model_name_;
  CacheInfo cache_;
  std::mutex mutex_;
  Histogram ttft_, itl_, tpot_, e2e_, queue_, prefill_, decode_, inference_, prompt_tokens_,
      generation_tokens_, max_generation_tokens_, params_n_, params_max_tokens_, iteration_tokens_;
  std::map<std::string, int64_t> success_by_reason_;
  // CPU utilisation is the CPU time used since the previous scrape over the wall time elapsed.
  double last_cpu_seconds_ = -1;
  double last_wall_seconds_ = 0;
  double cpu_utilization_ = 0;
};

}  // namespace pagoda::server
