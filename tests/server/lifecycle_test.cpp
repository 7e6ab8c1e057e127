// What `pagoda serve` and `pagoda generate` tell an operator (issue 21, lifecycle): the version,
// the non-default settings, what was loaded and how much fits, a line per step at --log-level
// debug, and --disable-log-stats accepted as a real flag. Runs the real binary on the built-in
// demo model, bounded in time.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "common/test_paths.h"
#include "server_process.h"

namespace pagoda::server::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(Lifecycle, ServeLogsVersionSettingsAndCapacity) {
  const Scratch scratch("pagoda_lifecycle_test");
  const fs::path out = scratch.dir / "serve.txt";
  const pid_t pid =
      spawn({"serve", "--model", "demo", "--port", "0", "--max-model-len", "256",
             "--kv-cache-space", "8MiB", "--api-key", "sekret-key", "--disable-log-stats"},
            out);
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  std::string text;
  while (Clock::now() < deadline && !contains(text, "engine ready")) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    text = read_file(out);
  }
  kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit(pid, std::chrono::seconds(30)), 0) << text;
  text = read_file(out);
  ASSERT_TRUE(contains(text, "engine ready")) << text;
  EXPECT_TRUE(std::regex_search(text, std::regex("Pagoda API server version \\d+\\.\\d+"))) << text;
  // The server's own flags (the key never in clear), then the engine's.
  EXPECT_TRUE(std::regex_search(
      text, std::regex("server args \\(non-default\\): .*--port 0.*--api-key <redacted>.*"
                       "--disable-log-stats")))
      << text;
  EXPECT_FALSE(contains(text, "sekret-key")) << text;
  // `demo` reaches the engine as the directory the CLI generated it into, under its own name.
  EXPECT_TRUE(std::regex_search(
      text, std::regex("engine args \\(non-default\\): model=\\S*/pagoda/demo, "
                       "served_model_name=demo, max_model_len=256, kv_cache_space=8\\.00 MiB")))
      << text;
  EXPECT_TRUE(std::regex_search(
      text, std::regex("architecture \\w+, [0-9.]+ [MB] parameters, weights [0-9.]+ \\w+ "
                       "\\(safetensors \\w+")))
      << text;
  // 8 MiB of blocks: the token count, and how many 256-token requests that is.
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(text, m, std::regex("KV cache: (\\d+) tokens \\((\\d+) blocks of 16\\)")))
      << text;
  const int tokens = std::stoi(m[1]);
  EXPECT_EQ(tokens, std::stoi(m[2]) * 16);
  ASSERT_TRUE(std::regex_search(
      text, m, std::regex("Maximum concurrency for 256 tokens per request: ([0-9.]+)x")))
      << text;
  EXPECT_NEAR(std::stod(m[1]), tokens / 256.0, 0.01);
  EXPECT_FALSE(contains(text, "--disable-log-stats has no effect")) << text;
}

// --allowed-clients: a bad entry stops the start before the model loads, naming the entry; a
// good list (here from the environment) is said in the log. Who is refused and who is served is
// server.HttpTransport.ClientsOutsideTheAllowListGet403BeforeAnythingIsRead.
TEST(Lifecycle, AllowedClientsAreCheckedAtTheStart) {
  const Scratch scratch("pagoda_lifecycle_acl_test");
  const fs::path bad = scratch.dir / "bad.txt";
  pid_t pid = spawn({"serve", "--model", "demo", "--port", "0", "--kv-cache-space", "8MiB",
                     "--allowed-clients", "127.0.0.1,10.0.0.1/8"},
                    bad);
  EXPECT_EQ(wait_exit(pid, std::chrono::seconds(30)), 1) << read_file(bad);
  EXPECT_TRUE(contains(read_file(bad),
                       "error: --allowed-clients: '10.0.0.1/8' has host bits set; the network is "
                       "10.0.0.0/8"))
      << read_file(bad);
  EXPECT_FALSE(contains(read_file(bad), "engine ready")) << read_file(bad);

  const fs::path good = scratch.dir / "good.txt";
  pid = spawn({"serve", "--model", "demo", "--port", "0", "--kv-cache-space", "8MiB"},
              {"PAGODA_ALLOWED_CLIENTS=10.0.0.0/8,::1"}, good);
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  std::string text;
  while (Clock::now() < deadline && !contains(text, "engine ready")) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    text = read_file(good);
  }
  kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit(pid, std::chrono::seconds(30)), 0) << read_file(good);
  EXPECT_TRUE(contains(read_file(good), "serving only clients in: 10.0.0.0/8, ::1/128"))
      << read_file(good);
}

TEST(Lifecycle, DebugLogSaysWhatEachStepScheduled) {
  const Scratch scratch("pagoda_lifecycle_test");
  const fs::path out = scratch.dir / "generate.txt";
  const pid_t pid = spawn({"generate", "--model", "demo", "--prompt", "one two three",
                           "--max-tokens", "3", "--ignore-eos", "--log-level", "debug"},
                          out);
  EXPECT_EQ(wait_exit(pid, std::chrono::seconds(60)), 0) << read_file(out);
  const std::string text = read_file(out);
  EXPECT_TRUE(std::regex_search(text, std::regex("pagoda \\d+\\.\\d+"))) << text;
  // The prompt in one prefill step, then a decode step per further token.
  EXPECT_TRUE(std::regex_search(
      text, std::regex("step 1: 1 prefill \\(\\d+ tokens\\), 0 decode \\(0 tokens\\), 0 "
                       "preempted, 0 waiting, KV blocks \\d+/\\d+")))
      << text;
  EXPECT_TRUE(contains(text, "step 2: 0 prefill (0 tokens), 1 decode (1 tokens)")) << text;
  EXPECT_TRUE(contains(text, "step 3: 0 prefill (0 tokens), 1 decode (1 tokens)")) << text;
  EXPECT_FALSE(contains(text, "step 4:")) << text;
}

TEST(Lifecycle, InfoLogHasNoStepLines) {
  const Scratch scratch("pagoda_lifecycle_test");
  const fs::path out = scratch.dir / "generate.txt";
  const pid_t pid = spawn({"generate", "--model", "demo", "--prompt", "one two", "--max-tokens",
                           "2", "--log-level", "info"},
                          out);
  EXPECT_EQ(wait_exit(pid, std::chrono::seconds(60)), 0) << read_file(out);
  const std::string text = read_file(out);
  // generate sizes its pool by need, and says so at info level.
  EXPECT_TRUE(contains(text, "KV cache sized by need: 1 blocks of 16 tokens")) << text;
  EXPECT_FALSE(contains(text, "step 1:")) << text;
}

}  // namespace
}  // namespace pagoda::server::testing
