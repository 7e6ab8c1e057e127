// Prometheus text rendering of engine and request metrics; see metrics.h.
#include "server/metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include <fmt/format.h>

#include "util/clock.h"

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
const std::vector<double> kIterationTokenBuckets = {1,   8,    16,   32,   64,   128,  256,
                                                    512, 1024, 2048, 4096, 8192, 16384};
const std::vector<double> kParamsNBuckets = {1, 2, 5, 10, 20};

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
  // A series without the model_name label (process_*, cache_config_info, as vLLM has them).
  void unlabelled(const std::string& name, const std::string& type, const std::string& help,
                  double value, const std::string& labels = {}) {
    header(name, type, help);
    out_ += labels.empty() ? fmt::format("{} {}\n", name, format_value(value))
                           : fmt::format("{}{{{}}} {}\n", name, labels, format_value(value));
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

namespace {

// The boot time in Unix seconds ("btime" in /proc/stat), 0 if unreadable.
double boot_time_seconds() {
  std::ifstream stat("/proc/stat");
  std::string key;
  while (stat >> key) {
    if (key == "btime") {
      double value = 0;
      stat >> value;
      return value;
    }
    stat.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return 0;
}

int64_t count_open_fds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  int64_t n = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n - 1;  // the descriptor opendir holds
}

}  // namespace

ProcessStats read_process_stats() {
  ProcessStats s;
  const long page_bytes = sysconf(_SC_PAGESIZE);
  const long ticks_per_s = sysconf(_SC_CLK_TCK);
  {
    // stat, after field 2 (comm, which may hold spaces: parsing starts after its closing
    // parenthesis): field 14 utime and 15 stime in clock ticks, 22 starttime in ticks after
    // boot, 23 vsize in bytes, 24 rss in pages; as prometheus_client reads them.
    std::ifstream stat("/proc/self/stat");
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');
    if (close != std::string::npos) {
      std::istringstream rest(line.substr(close + 2));
      std::string field;
      std::vector<std::string> fields;  // fields[0] is field 3
      while (rest >> field && fields.size() < 22) fields.push_back(field);
      if (fields.size() >= 22 && ticks_per_s > 0) {
        const auto ticks = static_cast<double>(ticks_per_s);
        s.cpu_seconds = (std::stod(fields[11]) + std::stod(fields[12])) / ticks;
        s.start_time_seconds = boot_time_seconds() + std::stod(fields[19]) / ticks;
        s.virtual_memory_bytes = std::stoll(fields[20]);
        s.resident_memory_bytes = std::stoll(fields[21]) * page_bytes;
      }
    }
  }
  s.open_fds = count_open_fds();
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0) s.max_fds = static_cast<int64_t>(limit.rlim_cur);
  return s;
}

namespace {

// prometheus_client's ProcessCollector: same names, help and types, no labels.
void write_process_metrics(Writer& w, const ProcessStats& p) {
  w.unlabelled("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.",
               static_cast<double>(p.virtual_memory_bytes));
  w.unlabelled("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
               static_cast<double>(p.resident_memory_bytes));
  w.unlabelled("process_start_time_seconds", "gauge",
               "Start time of the process since unix epoch in seconds.", p.start_time_seconds);
  w.unlabelled("process_cpu_seconds_total", "counter",
               "Total user and system CPU time spent in seconds.", p.cpu_seconds);
  w.unlabelled("process_open_fds", "gauge", "Number of open file descriptors.",
               static_cast<double>(p.open_fds));
  w.unlabelled("process_max_fds", "gauge", "Maximum number of open file descriptors.",
               static_cast<double>(p.max_fds));
}

}  // namespace

std::string render_process_metrics(const ProcessStats& process) {
  Writer w("");
  write_process_metrics(w, process);
  return w.take();
}

Metrics::Metrics(std::string model_name, int32_t max_model_len, CacheInfo cache)
    : model_name_(std::move(model_name)),
      cache_(std::move(cache)),
      ttft_(kTtftBuckets),
      itl_(kTokenLatencyBuckets),
      tpot_(kTokenLatencyBuckets),
      e2e_(kRequestLatencyBuckets),
      queue_(kRequestLatencyBuckets),
      prefill_(kRequestLatencyBuckets),
      decode_(kRequestLatencyBuckets),
      inference_(kRequestLatencyBuckets),
      prompt_tokens_(one_two_five_buckets(std::max(max_model_len, 1))),
      generation_tokens_(one_two_five_buckets(std::max(max_model_len, 1))),
      max_generation_tokens_(one_two_five_buckets(std::max(max_model_len, 1))),
      params_n_(kParamsNBuckets),
      params_max_tokens_(one_two_five_buckets(std::max(max_model_len, 1))),
      iteration_tokens_(kIterationTokenBuckets) {
  for (const char* reason : {"stop", "length", "abort"}) success_by_reason_[reason] = 0;
}

void Metrics::record_finished(const FinishedRequest& r) {
  std::lock_guard lock(mutex_);
  ++success_by_reason_[r.finish_reason.empty() ? "abort" : r.finish_reason];
  prompt_tokens_.observe(static_cast<double>(r.num_prompt_tokens));
  generation_tokens_.observe(static_cast<double>(r.num_generation_tokens));
  max_generation_tokens_.observe(static_cast<double>(r.max_num_generation_tokens));
  params_n_.observe(static_cast<double>(r.n));
  if (r.max_tokens > 0) params_max_tokens_.observe(static_cast<double>(r.max_tokens));
  queue_.observe(std::max(0.0, r.queue_time_s));
  e2e_.observe(std::max(0.0, r.e2e_s));
  if (r.prefill_time_s >= 0) prefill_.observe(r.prefill_time_s);
  if (r.decode_time_s >= 0) decode_.observe(r.decode_time_s);
  if (r.inference_time_s >= 0) inference_.observe(r.inference_time_s);
  if (r.ttft_s >= 0) {
    ttft_.observe(r.ttft_s);
    if (r.num_generation_tokens > 1) {
      tpot_.observe(
          std::max(0.0, (r.e2e_s - r.ttft_s) / static_cast<double>(r.num_generation_tokens - 1)));
    }
  }
}

void Metrics::record_step(int64_t num_tokens) {
  std::lock_guard lock(mutex_);
  iteration_tokens_.observe(static_cast<double>(num_tokens));
}

void Metrics::record_inter_token_latency(double seconds, int64_t num_tokens) {
  std::lock_guard lock(mutex_);
  for (int64_t i = 0; i < num_tokens; ++i) itl_.observe(std::max(0.0, seconds));
}

std::string Metrics::render(const EngineStats& stats, const ProcessStats& process) {
  std::lock_guard lock(mutex_);
  const double now = steady_seconds();
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
  // Speculative decoding (vLLM's SpecDecodingProm): zero without --speculative-config.
  w.counter("vllm:spec_decode_num_drafts_total", "Number of spec decoding drafts.",
            static_cast<double>(stats.spec_num_drafts));
  w.counter("vllm:spec_decode_num_draft_tokens_total", "Number of draft tokens.",
            static_cast<double>(stats.spec_num_draft_tokens));
  w.counter("vllm:spec_decode_num_accepted_tokens_total", "Number of accepted tokens.",
            static_cast<double>(stats.spec_num_accepted_tokens));
  w.header("vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter",
           "Accepted tokens per draft position.");
  for (size_t pos = 0; pos < stats.spec_num_accepted_tokens_per_pos.size(); ++pos) {
    w.sample("vllm:spec_decode_num_accepted_tokens_per_pos_total",
             static_cast<double>(stats.spec_num_accepted_tokens_per_pos[pos]),
             fmt::format("position=\"{}\"", pos));
  }
  // MoE models: routed experts run by decode steps, without and with drafts to verify (their
  // ratio to the layer passes is the mean union of experts a step's tokens were routed to).
  const std::pair<const char*, const ExpertStepStats*> expert_steps[] = {
      {"decode", &stats.decode_experts}, {"verify", &stats.verify_experts}};
  w.header("pagoda_moe_layer_passes_total", "counter",
           "MoE layer passes of decode steps, by whether the step verified drafts.");
  for (const auto& [step, e] : expert_steps) {
    w.sample("pagoda_moe_layer_passes_total", static_cast<double>(e->num_moe_layers),
             fmt::format("step=\"{}\"", step));
  }
  w.header("pagoda_moe_routed_experts_total", "counter",
           "Distinct routed experts run per MoE layer pass of decode steps, summed.");
  for (const auto& [step, e] : expert_steps) {
    w.sample("pagoda_moe_routed_experts_total", static_cast<double>(e->num_routed_experts),
             fmt::format("step=\"{}\"", step));
  }
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
  w.histogram("vllm:request_inference_time_seconds",
              "Histogram of time spent in RUNNING phase for request.", inference_);
  w.histogram("vllm:request_prefill_time_seconds",
              "Histogram of time spent in PREFILL phase for request.", prefill_);
  w.histogram("vllm:request_decode_time_seconds",
              "Histogram of time spent in DECODE phase for request.", decode_);
  w.histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", prompt_tokens_);
  w.histogram("vllm:request_generation_tokens", "Number of generation tokens processed.",
              generation_tokens_);
  w.histogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
              iteration_tokens_);
  w.histogram("vllm:request_max_num_generation_tokens",
              "Histogram of maximum number of requested generation tokens.",
              max_generation_tokens_);
  w.histogram("vllm:request_params_n", "Histogram of the n request parameter.", params_n_);
  w.histogram("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.",
              params_max_tokens_);
  // vLLM's Info-style gauge, always 1, the cache config in its labels (CacheConfig's field names;
  // the CPU pool is vLLM's num_gpu_blocks, as vLLM's CPU backend reports it).
  w.unlabelled("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig", 1,
               fmt::format("block_size=\"{}\",cache_dtype=\"{}\",cpu_kvcache_space_bytes=\"{}\","
                           "enable_prefix_caching=\"{}\",engine=\"0\",num_gpu_blocks=\"{}\"",
                           cache_.block_size, escape_label(cache_.dtype), cache_.num_bytes,
                           cache_.enable_prefix_caching ? "True" : "False", cache_.num_blocks));

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
  write_process_metrics(w, process);
  return w.take();
}

}  // namespace pagoda::server
