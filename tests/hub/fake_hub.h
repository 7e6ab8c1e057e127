// tests/hub/fake_hub.py started for one test: a local server that speaks the Hub's API over
// repositories made from local directories (see the script for its faults), on a free port.
// Also the scratch directories the tests build repositories and caches in.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/test_paths.h"

namespace pagoda::hub::testing {

namespace fs = std::filesystem;

inline std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline void write_bytes(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

// A directory of the test's own, removed afterwards.
class ScratchDir {
 public:
  ScratchDir() {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() /
           ("pagoda-hub-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const fs::path& dir() const { return dir_; }

 private:
  fs::path dir_;
};

class FakeHub {
 public:
  // `args`: the script's options after --port-file and --log (--repo org/name=DIR, --gated...).
  FakeHub(const std::vector<std::string>& args, const fs::path& work_dir)
      : port_file_(work_dir / "fake-hub.port"), log_file_(work_dir / "fake-hub.log") {
    std::vector<std::string> argv_strings = {
        "python3",     (pagoda::test::source_dir() / "tests/hub/fake_hub.py").string(),
        "--port-file", port_file_.string(),
        "--log",       log_file_.string()};
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : argv_strings) argv.push_back(a.data());
    argv.push_back(nullptr);
    const fs::path output = work_dir / "fake-hub.out";
    pid_ = ::fork();
    if (pid_ == 0) {
      std::freopen(output.c_str(), "w", stderr);
      std::freopen(output.c_str(), "a", stdout);
      ::execvp(argv[0], argv.data());
      ::_exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!fs::exists(port_file_)) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("fake_hub.py exited: " + read_bytes(output));
      }
      if (std::chrono::steady_clock::now() > deadline)
        throw std::runtime_error("fake_hub.py did not start in 30 s");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    endpoint_ = "http://127.0.0.1:" + read_bytes(port_file_);
  }
  ~FakeHub() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  FakeHub(const FakeHub&) = delete;
  FakeHub& operator=(const FakeHub&) = delete;

  const std::string& endpoint() const { return endpoint_; }

  // Every request so far: {"path", "query", "range", "authorization"}.
  std::vector<nlohmann::json> requests() const {
    std::vector<nlohmann::json> out;
    std::ifstream in(log_file_);
    for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
    return out;
  }

 private:
  fs::path port_file_, log_file_;
  pid_t pid_ = -1;
  std::string endpoint_;
};

// The testdata model the fake repositories are made of, or "" (the test then skips).
inline fs::path stories_model() {
  const fs::path dir = pagoda::test::testdata_dir() / "models/stories260K-hf";
  return fs::exists(dir / "model.safetensors") ? dir : fs::path();
}

inline fs::path tiny_gguf() {
  const fs::path file =
      pagoda::test::testdata_dir() / "models/llama-2-tiny-random/llama-2-tiny-random.gguf";
  return fs::exists(file) ? file : fs::path();
}

inline bool have_python() {
  return std::system("python3 -c 'import http.server' >/dev/null 2>&1") == 0;
}

}  // namespace pagoda::hub::testing
