// Shared by the loader tests: a fresh directory per test (removed afterwards) and a check
// that an error is one line naming what it should.
#pragma once

#include <atomic>
#include <filesystem>
#include <initializer_list>
#include <string>

#include <gtest/gtest.h>

#include <unistd.h>

#include "util/error.h"

namespace pagoda::test {

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("pagoda-loader-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// The message of the pagoda::Error that `f` throws ("" and a test failure if none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const pagoda::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a pagoda::Error";
  return "";
}

// One line, containing every part.
inline void expect_message(const std::string& message, std::initializer_list<std::string> parts) {
  EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line: " << message;
  for (const std::string& part : parts) {
    EXPECT_NE(message.find(part), std::string::npos) << "expected '" << part << "' in: " << message;
  }
}

}  // namespace pagoda::test
