// The real binary with models by name, against tests/hub/fake_hub.py: `pagoda download` prints
// the snapshot, `pagoda generate --model org/name` downloads and runs it, and runs it again
// offline from the cache.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/cli_process.h"
#include "hub/fake_hub.h"

namespace pagoda::hub {
namespace {

using pagoda::cli::testing::run_pagoda;
using pagoda::cli::testing::RunResult;
using testing::FakeHub;
using testing::ScratchDir;

std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  return text;
}

class HubCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::stories_model().empty())
      GTEST_SKIP() << "testdata models/stories260K-hf is absent";
    if (!testing::have_python()) GTEST_SKIP() << "python3 is absent: the fake hub cannot run";
    hub_ = std::make_unique<FakeHub>(
        std::vector<std::string>{"--repo", "tiny/stories=" + testing::stories_model().string()},
        scratch_.dir());
    endpoint_ = hub_->endpoint();
    hf_home_ = (scratch_.dir() / "hf").string();
  }

  std::vector<std::string> env(bool offline = false) const {
    // A token from the developer's own environment must not reach the fake hub.
    return {"HF_ENDPOINT=" + endpoint_,
            "HF_HOME=" + hf_home_,
            "HF_TOKEN=",
            "HF_HUB_CACHE=",
            "HF_HUB_OFFLINE=" + std::string(offline ? "1" : "0"),
            "VLLM_USE_MODELSCOPE=0"};
  }

  ScratchDir scratch_;
  std::unique_ptr<FakeHub> hub_;
  std::string endpoint_;  // kept after the server is gone
  std::string hf_home_;
};

TEST_F(HubCli, DownloadPrintsTheSnapshotPath) {
  const RunResult r = run_pagoda({"download", "tiny/stories"}, scratch_.dir(), env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::filesystem::path snapshot = trimmed(r.out);
  EXPECT_EQ(snapshot.parent_path().parent_path(),
            std::filesystem::path(hf_home_) / "hub/models--tiny--stories");
  EXPECT_TRUE(std::filesystem::exists(snapshot / "model.safetensors"));

  const std::string elsewhere = (scratch_.dir() / "elsewhere").string();
  const RunResult other =
      run_pagoda({"download", "tiny/stories", "--download-dir", elsewhere, "--include", "*.json"},
                 scratch_.dir(), env());
  ASSERT_EQ(other.exit_code, 0) << other.err;
  EXPECT_EQ(trimmed(other.out).rfind(elsewhere + "/models--tiny--stories/snapshots/", 0), 0u)
      << other.out;
  EXPECT_TRUE(std::filesystem::exists(trimmed(other.out) + "/config.json"));
  EXPECT_FALSE(std::filesystem::exists(trimmed(other.out) + "/model.safetensors"));
}

TEST_F(HubCli, DownloadOfAMissingRepoSaysSo) {
  const RunResult r = run_pagoda({"download", "tiny/nope"}, scratch_.dir(), env());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("repository tiny/nope not found on " + hub_->endpoint()), std::string::npos)
      << r.err;
}

TEST_F(HubCli, GenerateByNameThenOffline) {
  // The greedy continuation of ../shared/testdata/models/stories260K-hf/EXPECTED.md.
  const std::vector<int> expected = {432, 383, 286, 261, 376, 298, 315, 421};
  const std::vector<std::string> args = {
      "generate",     "--model", "tiny/stories",  "--prompt", "Once upon a time",
      "--max-tokens", "8",       "--temperature", "0",        "--ignore-eos",
      "--json"};
  const RunResult online = run_pagoda(args, scratch_.dir(), env());
  ASSERT_EQ(online.exit_code, 0) << online.err;
  EXPECT_EQ(nlohmann::json::parse(online.out)["token_ids"].get<std::vector<int>>(), expected);

  hub_.reset();  // the server is gone: the cache alone serves the second run
  const RunResult offline = run_pagoda(args, scratch_.dir(), env(/*offline=*/true));
  ASSERT_EQ(offline.exit_code, 0) << offline.err;
  EXPECT_EQ(nlohmann::json::parse(offline.out)["token_ids"].get<std::vector<int>>(), expected);
}

// `tokenize --model org/name` fetches the tokenizer files alone.
TEST_F(HubCli, TokenizeFetchesOnlyTheTokenizer) {
  const RunResult r = run_pagoda(
      {"tokenize", "--model", "tiny/stories", "Once upon a time", "--add-special-tokens"},
      scratch_.dir(), env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(trimmed(r.out), "1 403 407 261 378");  // EXPECTED.md's prompt ids
  const std::filesystem::path snapshots =
      std::filesystem::path(hf_home_) / "hub/models--tiny--stories/snapshots";
  for (const auto& snapshot : std::filesystem::directory_iterator(snapshots)) {
    EXPECT_TRUE(std::filesystem::exists(snapshot.path() / "tokenizer.json"));
    EXPECT_FALSE(std::filesystem::exists(snapshot.path() / "model.safetensors"));
  }
}

}  // namespace
}  // namespace pagoda::hub
