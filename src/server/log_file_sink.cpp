// Reopenable log file; see log_file_sink.h.
#include "server/log_file_sink.h"

#include <cerrno>
#include <cstring>

#include "util/error.h"

namespace pagoda::server {

LogFileSink::LogFileSink(std::string path) : path_(std::move(path)) {
  open_locked();
}

LogFileSink::~LogFileSink() {
  if (file_ != nullptr) std::fclose(file_);
}

void LogFileSink::open_locked() {
  std::FILE* f = std::fopen(path_.c_str(), "a");
  if (f == nullptr) fail("{}: cannot open the log file: {}", path_, std::strerror(errno));
  if (file_ != nullptr) std::fclose(file_);
  file_ = f;
}

void LogFileSink::reopen() {
  std::lock_guard lock(mutex_);
  try {
    open_locked();
  } catch (const Error&) {
    // Keep writing to the old descriptor rather than losing lines.
  }
}

void LogFileSink::sink_it_(const spdlog::details::log_msg& msg) {
  spdlog::memory_buf_t formatted;
  formatter_->format(msg, formatted);
  std::fwrite(formatted.data(), 1, formatted.size(), file_);
  // One line per request, not per token: flushing each keeps `tail -f` and crashes honest.
  std::fflush(file_);
}

void LogFileSink::flush_() {
  std::fflush(file_);
}

}  // namespace pagoda::server
