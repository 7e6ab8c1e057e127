// An spdlog sink that appends to a file and can reopen it, so that `logrotate` can move the file
// away and send SIGHUP (the classic postrotate step) without losing lines or needing copytruncate.
#pragma once

#include <cstdio>
#include <mutex>
#include <string>

#include <spdlog/sinks/base_sink.h>

namespace pagoda::server {

class LogFileSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit LogFileSink(std::string path);  // throws pagoda::Error when the file cannot be opened
  ~LogFileSink() override;
  // Closes and reopens the path (after logrotate renamed it); safe from any thread.
  void reopen();

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override;
  void flush_() override;

 private:
  void open_locked();

  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace pagoda::server
