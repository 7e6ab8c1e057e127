// The periodic stats line vLLM's LoggingStatLogger prints while the server works:
//   Avg prompt throughput: 812.4 tokens/s, Avg generation throughput: 96.1 tokens/s, Running:
//   4 reqs, Waiting: 0 reqs, KV cache usage: 12.5%, Prefix cache hit rate: 40.0%
// The engine thread feeds it every EngineStats snapshot with the time; once an interval has
// passed it returns the line for that interval, or nothing when the interval was idle (no tokens
// and no requests), so an idle server stays quiet. As vLLM, the first idle interval after a busy
// one still gets a line, so that the log shows the throughput falling to zero.
#pragma once

#include <optional>
#include <string>

#include "pagoda/engine.h"

namespace pagoda {

class StatsLogger {
 public:
  explicit StatsLogger(double interval_s = 10.0);

  // `now_s` is a steady-clock time in seconds. Returns the line to log, if one is due.
  std::optional<std::string> update(const EngineStats& stats, double now_s);

  double interval_s() const { return interval_s_; }

 private:
  double interval_s_;
  double interval_start_s_ = -1;  // < 0: no snapshot seen yet
  EngineStats at_start_;          // the counters when the interval began
  bool last_was_busy_ = false;
};

}  // namespace pagoda
