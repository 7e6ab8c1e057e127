// Progress bars and lines for startup tasks; see progress.h.
#include "util/progress.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "util/clock.h"

namespace pagoda {
namespace {

constexpr int kBarWidth = 30;

// "2.1/5.2 GiB": both numbers in the unit that suits the total.
std::string format_fraction(uint64_t done, uint64_t total) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double scale = 1;
  int u = 0;
  while (static_cast<double>(total) / scale >= 1024 && u < 4) {
    scale *= 1024;
    ++u;
  }
  return fmt::format("{:.1f}/{:.1f} {}", static_cast<double>(done) / scale,
                     static_cast<double>(total) / scale, units[u]);
}

int percent(uint64_t done, uint64_t total) {
  if (total == 0) return 0;
  return static_cast<int>(std::min<uint64_t>(100, done * 100 / total));
}

}  // namespace

ProgressOptions default_progress_options() {
  ProgressOptions o;
  o.terminal = isatty(STDERR_FILENO) != 0;
  if (!spdlog::should_log(spdlog::level::info)) {
    // --log-level warning or quieter: the caller asked for no chatter.
    o.write_bar = [](std::string_view) {};
    o.write_line = [](std::string_view) {};
  }
  return o;
}

Progress::Progress(std::string label, uint64_t total_bytes, ProgressOptions options)
    : label_(std::move(label)), total_bytes_(total_bytes), options_(std::move(options)) {
  if (!options_.clock) options_.clock = steady_seconds;
  if (!options_.write_bar) {
    options_.write_bar = [](std::string_view text) {
      std::fwrite(text.data(), 1, text.size(), stderr);
      std::fflush(stderr);
    };
  }
  if (!options_.write_line) {
    options_.write_line = [](std::string_view text) { spdlog::info("{}", text); };
  }
  start_s_ = options_.clock();
}

Progress::~Progress() {
  finish();
}

std::string Progress::render_line(uint64_t done) const {
  const uint64_t total = total_bytes_.load();
  return fmt::format("{}: {}% ({})", label_, percent(done, total), format_fraction(done, total));
}

std::string Progress::render_bar(uint64_t done) const {
  const uint64_t total = total_bytes_.load();
  const int filled = percent(done, total) * kBarWidth / 100;
  // '\r' and the erase-to-end-of-line escape redraw the bar in place.
  return fmt::format("\r{} [{}{}] {:3}% ({})\x1b[K", label_, std::string(filled, '#'),
                     std::string(kBarWidth - filled, ' '), percent(done, total),
                     format_fraction(done, total));
}

void Progress::advance(uint64_t bytes) {
  const uint64_t done = done_bytes_.fetch_add(bytes) + bytes;
  report(done);
}

void Progress::report(uint64_t done) {
  // Threads that find another one reporting skip: the next advance reports the newer count.
  std::unique_lock lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock() || finished_ || total_bytes_.load() == 0) return;
  const double now = options_.clock();
  if (now - start_s_ < options_.first_report_s) return;
  const double interval = options_.terminal ? options_.bar_interval_s : options_.line_interval_s;
  if (last_report_s_ >= 0 && now - last_report_s_ < interval) return;
  last_report_s_ = now;
  if (options_.terminal) {
    options_.write_bar(render_bar(done));
    drew_bar_ = true;
  } else {
    options_.write_line(render_line(done));
  }
}

void Progress::finish() {
  std::lock_guard lock(mutex_);
  if (finished_) return;
  finished_ = true;
  // Lines stop where they are (the caller logs the outcome); a bar is completed and ended.
  if (drew_bar_) options_.write_bar(render_bar(done_bytes_.load()) + "\n");
}

}  // namespace pagoda
