// Running the real `pagoda` binary from a test: a scratch directory, a child process with its
// output in a file, a bounded wait for its exit. Shared by the tests that start `pagoda serve`
// and `pagoda generate` as a user would.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/test_paths.h"

namespace pagoda::server::testing {

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A directory of the test's own, removed with everything in it at the end.
struct Scratch {
  std::filesystem::path dir;
  explicit Scratch(const std::string& name)
      : dir(std::filesystem::temp_directory_path() / (name + "_" + std::to_string(getpid()))) {
    std::filesystem::create_directories(dir);
  }
  ~Scratch() {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
};

// `pagoda ARGS...` with `env` added, stdout and stderr into `output`; returns the pid.
inline pid_t spawn(const std::vector<std::string>& args, const std::vector<std::string>& env,
                   const std::filesystem::path& output) {
  std::vector<std::string> argv_strings = {pagoda::test::pagoda_binary().string()};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings = env;
  const pid_t pid = fork();
  if (pid == 0) {
    for (std::string& e : env_strings) putenv(e.data());
    std::freopen(output.c_str(), "w", stderr);
    std::freopen(output.c_str(), "a", stdout);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

inline pid_t spawn(const std::vector<std::string>& args, const std::filesystem::path& output) {
  return spawn(args, {}, output);
}

// Waits up to `timeout` for the process to exit; its exit code, or -1 (then it is killed).
inline int wait_exit(pid_t pid, std::chrono::seconds timeout) {
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

}  // namespace pagoda::server::testing
