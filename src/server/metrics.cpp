// Prometheus text rendering of engine and request metrics; see metrics.h.
#include "server/metrics.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace pagoda::server {
namespace {

// Bucket bounds as vLLM v1 defines them (vllm/v1/metrics/loggers.py), so dashboards' quantile
// queries see the same resolution.
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                          0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                          20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kTokenLatencyBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                                  0.3,  0.4,   0.5,  0.75,  1.0, 2.5,  5.0,
                                                  7.5,  10.0,  20.0, 40.0,  80.0};
const std::vector<double> kRequestLatencyBuckets = {
    0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Label values escape backslash, double quote and newline (exposition format spec).
std::string escape_label(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string format_value(double v) {
  return fmt::format("{}", v);
}

class Writer {
 public:
  explicit Writer(const std::string& model_name)
      : label_(fmt::format("model_name=\"{}\"", escape_label(model_name))) {}

  void header(const std::string& name, const std::string& type, const std::string& help) {
    out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  void sample(const std::string& name, double value, const std::string& extra_labels = {}) {
    out_ += fmt::format("{}{{{}{}}} {}\n", name, label_,
                        extra_labels.empty() ? "" : "," + extra_labels, format_value(value));
  }
  void gauge(const std::string& name, const std::string& help, double value) {
    header(name, "gauge", help);
    sample(name, value);
  }
  void counter(const std::string& name, const std::string& help, double value) {
    header(name, "counter", help);
    sample(name, value);
  }
  void histogram(const std::string& name, const std::string& help, const Histogram& h) {
    header(name, "histogram", help);
    const std::vector<uint64_t> counts = h.cumulative_counts();
    for (size_t i = 0; i < h.bounds().size(); ++i) {
      sample(name + "_bucket", static_cast<double>(counts[i]),
             fmt::format("le=\"{}\"", format_value(h.bounds()[i])));
    }
    sample(name + "_bucket", static_cast<double>(counts.back()), "le=\"+Inf\"");
    sample(name + "_sum", h.sum());
    sample(name + "_count", static_cast<double>(h.count()));
  }
  std::string take() { return std::move(out_); }

 private:
  std::string label_;
  std::string out_;
};

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), bucket_counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  ++bucket_counts_[i];
  sum_ += value;
  ++count_;
}

std::vector<uint64_t> Histogram::cumulative_counts() const {
  std::vector<uint64_t> out(bucket_counts_.size());
  uint64_t running = 0;
  for (size_t i = 0; i < bucket_counts_.size(); ++i) out[i] = running += bucket_counts_[i];
  return out;
}

std::vector<double> one_two_five_buckets(double max_value) {
  std::vector<double> out;
  for (double exponent = 1;; exponent *= 10) {
    for (double m : {1.0, 2.0, 5.0}) {
      if (m * exponent > max_value) return out;
      out.push_back(m * exponent);
    }
  }
}

ProcessStats read_process_stats() {
  ProcessStats s;
  const long page_bytes = sysconf(_SC_PAGESIZE);
  const long ticks_per_s = sysconf(_SC_CLK_TCK);
  {
    // statm: size resident shared text lib data dt, in pages.
    std::ifstream statm("/proc/self/statm");
    int64_t size_pages = 0, resident_pages = 0;
    if (statm >> size_pages >> resident_pages)
      s.resident_memory_bytes = resident_pages * page_bytes;
  }
  {
    // stat: fields 14 and 15 are utime and stime in clock ticks; field 2 (comm) may hold spaces,
    // so parsing starts after its closing parenthesis.
    std::ifstream stat("/proc/self/stat");
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');
    if (close != std::string::npos) {
      std::istringstream rest(line.substr(close + 2));
      std::string field;
      std::vector<std::string> fields;
      while (rest >> field && fields.size() < 13) fields.push_back(field);
      if (fields.size() >= 13 && ticks_per_s > 0) {
        s.cpu_seconds =
            (std::stod(fields[11]) + std::stod(fields[12])) / static_cast<double>(ticks_per_s);
      }
    }
  }
  return s;
}

Metrics::Metrics(std::string model_name, int32_t max_model_len)
    : model_name_(std::move(model_name)),
      ttft_(kTtftBuckets),
      itl_(kTokenLatencyBuckets),
      tpot_(kTokenLatencyBuckets),
      e2e_(kRequestLatencyBuckets),
      queue_(kRequestLatencyBuckets),
      prompt_tokens_(one_two_five_buckets(std::max(max_model_len, 1))),
      generation_tokens_(one_two_five_buckets(std::max(max_model_len, 1))) {
  for (const char* reason : {"stop", "length", "abort"}) success_by_reason_[reason] = 0;
}

void Metrics::record_finished(const FinishedRequest& r) {
  std::lock_guard lock(mutex_);
  ++success_by_reason_[r.finish_reason.empty() ? "abort" : r.finish_reason];
  prompt_tokens_.observe(static_cast<double>(r.num_prompt_tokens));
  generation_tokens_.observe(static_cast<double>(r.num_generation_tokens));
  queue_.observe(std::max(0.0, r.queue_time_s));
  e2e_.observe(std::max(0.0, r.e2e_s));
  if (r.ttft_s >= 0) {
    ttft_.observe(r.ttft_s);
    if (r.num_generation_tokens > 1) {
      tpot_.observe(
          std::max(0.0, (r.e2e_s - r.ttft_s) / static_cast<double>(r.num_generation_tokens - 1)));
    }
  }
}

void Metrics::record_inter_token_latency(double seconds, int64_t num_tokens) {
  std::lock_guard lock(mutex_);
  for (int64_t i = 0; i < num_tokens; ++i) itl_.observe(std::max(0.0, seconds));
}

std::string Metrics::render(const EngineStats& stats, const ProcessStats& process) {
  std::lock_guard lock(mutex_);
  const double now = wall_seconds();
  if (last_cpu_seconds_ >= 0 && now > last_wall_seconds_) {
    const long num_cpus = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
    cpu_utilization_ = std::clamp((process.cpu_seconds - last_cpu_seconds_) /
                                      (now - last_wall_seconds_) / static_cast<double>(num_cpus),
                                  0.0, 1.0);
  }
  last_cpu_seconds_ = process.cpu_seconds;
  last_wall_seconds_ = now;

  Writer w(model_name_);
  w.gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
          stats.num_running);
  w.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
          stats.num_waiting);
  w.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
          stats.kv_cache_usage);
  w.counter("vllm:num_preemptions_total", "Cumulative number of preemptions from the engine.",
            static_cast<double>(stats.num_preemptions));
  w.counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.",
            static_cast<double>(stats.prompt_tokens));
  w.counter("vllm:generation_tokens_total", "Number of generation tokens processed.",
            static_cast<double>(stats.generation_tokens));
  w.counter("vllm:prefix_cache_queries_total",
            "Prefix cache queries, in terms of number of queried tokens.",
            static_cast<double>(stats.prefix_cache_queries));
  w.counter("vllm:prefix_cache_hits_total",
            "Prefix cache hits, in terms of number of cached tokens.",
            static_cast<double>(stats.prefix_cache_hits));
  w.header("vllm:request_success_total", "counter", "Count of successfully processed requests.");
  for (const auto& [reason, count] : success_by_reason_) {
    w.sample("vllm:request_success_total", static_cast<double>(count),
             fmt::format("finished_reason=\"{}\"", escape_label(reason)));
  }
  w.histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
              ttft_);
  w.histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
              itl_);
  w.histogram("vllm:time_per_output_token_seconds",
              "Histogram of time per output token in seconds.", tpot_);
  w.histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
              e2e_);
  w.histogram("vllm:request_queue_time_seconds",
              "Histogram of time spent in WAITING phase for request.", queue_);
  w.histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", prompt_tokens_);
  w.histogram("vllm:request_generation_tokens", "Number of generation tokens processed.",
              generation_tokens_);

  const double kv_total = static_cast<double>(stats.kv_cache_total_bytes);
  w.gauge("pagoda_resident_memory_bytes",
          "Resident memory of the server process (/proc/self/statm).",
          static_cast<double>(process.resident_memory_bytes));
  w.gauge("pagoda_kv_cache_used_bytes", "Bytes of the KV cache pool in blocks that are in use.",
          kv_total * stats.kv_cache_usage);
  w.gauge("pagoda_kv_cache_total_bytes", "Bytes of the KV cache pool.", kv_total);
  w.gauge("pagoda_cpu_utilization_ratio",
          "CPU time used by the process since the previous scrape over wall time, as a fraction of "
          "all cores.",
          cpu_utilization_);
  w.counter("pagoda_process_cpu_seconds_total", "User and system CPU time of the process.",
            process.cpu_seconds);
  return w.take();
}

}  // namespace pagoda::server
