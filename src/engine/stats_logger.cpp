// Interval throughput and the vLLM-style stats line; see stats_logger.h.
#include "engine/stats_logger.h"

#include <fmt/format.h>

namespace pagoda {

StatsLogger::StatsLogger(double interval_s) : interval_s_(interval_s) {}

std::optional<std::string> StatsLogger::update(const EngineStats& stats, double now_s) {
  if (interval_start_s_ < 0) {
    interval_start_s_ = now_s;
    at_start_ = stats;
    return std::nullopt;
  }
  const double elapsed_s = now_s - interval_start_s_;
  if (elapsed_s < interval_s_) return std::nullopt;

  // Prompt tokens the model computed (vLLM's prompt throughput is work done, not work queued).
  const int64_t prompt_tokens = stats.prompt_tokens_computed - at_start_.prompt_tokens_computed;
  const int64_t generation_tokens = stats.generation_tokens - at_start_.generation_tokens;
  const bool busy =
      prompt_tokens > 0 || generation_tokens > 0 || stats.num_running > 0 || stats.num_waiting > 0;
  const bool log = busy || last_was_busy_;
  last_was_busy_ = busy;
  interval_start_s_ = now_s;
  at_start_ = stats;
  if (!log) return std::nullopt;

  // The hit rate over the whole run: an interval of pure decode queries nothing.
  const double hit_rate = stats.prefix_cache_queries > 0
                              ? static_cast<double>(stats.prefix_cache_hits) /
                                    static_cast<double>(stats.prefix_cache_queries)
                              : 0.0;
  return fmt::format(
      "Avg prompt throughput: {:.1f} tokens/s, Avg generation throughput: {:.1f} tokens/s, "
      "Running: {} reqs, Waiting: {} reqs, KV cache usage: {:.1f}%, Prefix cache hit rate: "
      "{:.1f}%",
      static_cast<double>(prompt_tokens) / elapsed_s,
      static_cast<double>(generation_tokens) / elapsed_s, stats.num_running, stats.num_waiting,
      stats.kv_cache_usage * 100, hit_rate * 100);
}

}  // namespace pagoda
