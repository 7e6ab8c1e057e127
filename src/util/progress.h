// Progress of a long startup task (reading weights, quantizing them, reserving the KV pool), so
// that a load of tens of seconds is not silence: on a terminal a bar redrawn in place on stderr,
// otherwise (a log file, journald, a pipe) one log line every few seconds, e.g.
//   reading weights: 41% (2.1/5.2 GiB)
// A task that ends before the first report is due prints nothing. Thread-safe: the KV pool is
// faulted in by several threads at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>

namespace pagoda {

struct ProgressOptions {
  bool terminal = false;       // redraw a bar in place (else write whole lines)
  double first_report_s = 1;   // nothing before this much time has passed
  double line_interval_s = 5;  // lines: at most one per interval
  double bar_interval_s = 0.1;
  // Seconds on a steady clock; the real one when empty (tests inject their own).
  std::function<double()> clock;
  // Where a bar goes (text with '\r', no newline): stderr when empty.
  std::function<void(std::string_view)> write_bar;
  // Where a line goes: spdlog::info when empty.
  std::function<void(std::string_view)> write_line;
};

// The bar on a terminal (stderr is a tty) and lines elsewhere; silent unless info logs are on.
ProgressOptions default_progress_options();

class Progress {
 public:
  // `total_bytes` may be 0 and set later with set_total (when the files are known).
  Progress(std::string label, uint64_t total_bytes,
           ProgressOptions options = default_progress_options());
  ~Progress();  // finish()
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void set_total(uint64_t total_bytes) { total_bytes_ = total_bytes; }
  void advance(uint64_t bytes);
  // Ends the bar with 100% and a newline if one was drawn; idempotent.
  void finish();

  uint64_t done_bytes() const { return done_bytes_.load(); }

 private:
  std::string render_line(uint64_t done) const;
  std::string render_bar(uint64_t done) const;
  void report(uint64_t done);

  std::string label_;
  std::atomic<uint64_t> total_bytes_;
  std::atomic<uint64_t> done_bytes_{0};
  ProgressOptions options_;
  std::mutex mutex_;  // guards the fields below and the output
  double start_s_ = 0;
  double last_report_s_ = -1;
  bool drew_bar_ = false;
  bool finished_ = false;
};

}  // namespace pagoda
