// Running the real `pagoda` binary from a test: once to completion with its output captured, or
// as a live process fed through a stdin pipe (for `pagoda chat`), always bounded in time.
// stdout and stderr go to files, so a chatty child never blocks on a full pipe.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "common/test_paths.h"

namespace pagoda::cli::testing {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

inline std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A directory of its own per test, removed afterwards.
class Scratch {
 public:
  Scratch() {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() /
           ("pagoda-cli-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~Scratch() {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  const fs::path& dir() const { return dir_; }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

 private:
  fs::path dir_;
};

// `pagoda ARGS...`, alive until it exits or the test ends (then killed). The child's environment
// is the test's plus `env` ("NAME=value").
class PagodaProcess {
 public:
  PagodaProcess(const std::vector<std::string>& args, const fs::path& output_dir,
                const std::vector<std::string>& env = {})
      : out_path_(output_dir / ("stdout-" + std::to_string(id_))),
        err_path_(output_dir / ("stderr-" + std::to_string(id_))) {
    std::vector<std::string> argv_strings = {pagoda::test::pagoda_binary().string()};
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : argv_strings) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_strings = env;
    int stdin_pipe[2];
    if (::pipe(stdin_pipe) != 0) throw std::runtime_error("pipe failed");
    pid_ = ::fork();
    if (pid_ == 0) {
      for (std::string& e : env_strings) ::putenv(e.data());
      ::dup2(stdin_pipe[0], STDIN_FILENO);
      ::close(stdin_pipe[0]);
      ::close(stdin_pipe[1]);
      if (!std::freopen(out_path_.c_str(), "w", stdout)) ::_exit(126);
      if (!std::freopen(err_path_.c_str(), "w", stderr)) ::_exit(126);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(stdin_pipe[0]);
    stdin_fd_ = stdin_pipe[1];
    ::signal(SIGPIPE, SIG_IGN);  // a child that left early must not kill the test
  }
  ~PagodaProcess() {
    close_stdin();
    if (exit_code_ == kRunning) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  PagodaProcess(const PagodaProcess&) = delete;
  PagodaProcess& operator=(const PagodaProcess&) = delete;

  void write_stdin(const std::string& text) {
    ASSERT_GE(stdin_fd_, 0);
    ASSERT_EQ(::write(stdin_fd_, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  }
  void close_stdin() {
    if (stdin_fd_ >= 0) ::close(stdin_fd_);
    stdin_fd_ = -1;
  }
  void send_signal(int sig) { ::kill(pid_, sig); }

  std::string out() const { return read_text(out_path_); }
  std::string err() const { return read_text(err_path_); }

  // True once `done` holds, false after `timeout` (or when the process exits first and `done`
  // still does not hold).
  bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      if (done()) return true;
      if (!running()) return done();
      std::this_thread::sleep_for(10ms);
    }
    return done();
  }

  bool running() {
    if (exit_code_ != kRunning) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) != pid_) return true;
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return false;
  }

  // The exit code (128 + signal for a killed child), or -1 if it is still running after
  // `timeout` (it is then killed).
  int wait_exit(std::chrono::milliseconds timeout) {
    wait_until([this] { return !running(); }, timeout);
    if (running()) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
      exit_code_ = -1;
    }
    return exit_code_;
  }

 private:
  static constexpr int kRunning = -1000;
  static int serial() {
    static std::atomic<int> n{0};
    return n++;
  }

  int id_ = serial();  // names the output files; declared first, so set first
  fs::path out_path_, err_path_;
  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  int exit_code_ = kRunning;
};

struct RunResult {
  int exit_code = -1;
  std::string out, err;
};

// Runs `pagoda ARGS...` with empty stdin to completion (killed after `timeout`).
inline RunResult run_pagoda(const std::vector<std::string>& args, const fs::path& output_dir,
                            const std::vector<std::string>& env = {},
                            std::chrono::milliseconds timeout = 180s) {
  PagodaProcess p(args, output_dir, env);
  p.close_stdin();
  RunResult r;
  r.exit_code = p.wait_exit(timeout);
  r.out = p.out();
  r.err = p.err();
  return r;
}

// pids of the processes (from /proc) whose command line holds every one of `parts`.
inline std::vector<pid_t> processes_with(const std::vector<std::string>& parts) {
  std::vector<pid_t> pids;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "cmdline", std::ios::binary);
    const std::string cmdline((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
    bool all = !cmdline.empty();
    for (const std::string& p : parts) all = all && cmdline.find(p) != std::string::npos;
    if (all) pids.push_back(std::stoi(name));
  }
  return pids;
}

}  // namespace pagoda::cli::testing
