// Downloads against tests/hub/fake_hub.py, a local server speaking the Hub's API: the cache
// layout huggingface_hub writes, reuse without network, resumption, checksums, redirects,
// 401/404, GGUF selection and ModelScope.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "hub/checksum.h"
#include "hub/fake_hub.h"
#include "hub/hub_cache.h"
#include "hub/resolve_model.h"
#include "util/error.h"

namespace pagoda::hub {
namespace {

using namespace testing;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string sha256_of(const std::string& bytes) {
  RepoFile file;
  file.sha256 = "x";
  ContentChecksum checksum(file);
  checksum.update(bytes);
  return checksum.hex();
}

class HubDownload : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = stories_model();
    if (model_.empty()) GTEST_SKIP() << "testdata models/stories260K-hf is absent";
    if (!have_python()) GTEST_SKIP() << "python3 is absent: the fake hub cannot run";
    // The repo: the testdata model, plus files a run must not fetch (another weight format,
    // a subfolder checkpoint, pickles, a GGUF).
    repo_ = scratch_.dir() / "repo";
    for (const auto& entry : fs::directory_iterator(model_))
      fs::create_directories(repo_),
          fs::create_symlink(entry.path(), repo_ / entry.path().filename());
    write_bytes(repo_ / "consolidated.safetensors", "other weights");
    write_bytes(repo_ / "original/model.safetensors", "original weights");
    write_bytes(repo_ / "pytorch_model.bin", "pickle");
    settings_.cache_dir = (scratch_.dir() / "cache").string();
    settings_.retry_delay_s = 0.05;
    settings_.token = "";
  }

  // Starts the server with the repo as tiny/stories and `extra` options.
  void start(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--repo", "tiny/stories=" + repo_.string()};
    args.insert(args.end(), extra.begin(), extra.end());
    hub_ = std::make_unique<FakeHub>(args, scratch_.dir());
    settings_.endpoint = hub_->endpoint();
  }

  fs::path repo_dir() const { return fs::path(settings_.cache_dir) / "models--tiny--stories"; }

  std::vector<std::string> requests_with(const std::string& path_part) const {
    std::vector<std::string> out;
    for (const auto& r : hub_->requests()) {
      const std::string path = r["path"].get<std::string>();
      if (contains(path, path_part))
        out.push_back(r["range"].is_null() ? "" : r["range"].get<std::string>());
    }
    return out;
  }

  ScratchDir scratch_;
  fs::path model_, repo_;
  HubSettings settings_;
  std::unique_ptr<FakeHub> hub_;
};

TEST_F(HubDownload, FreshDownloadWritesTheHubCacheLayout) {
  start();
  const std::string path = resolve_model("tiny/stories", {}, settings_);
  const std::string commit = read_bytes(repo_dir() / "refs/main");  // no newline, as HF writes
  ASSERT_EQ(commit.size(), 40u) << commit;
  EXPECT_EQ(fs::path(path), repo_dir() / "snapshots" / commit);
  for (const char* name : {"config.json", "generation_config.json", "tokenizer.json",
                           "tokenizer_config.json", "model.safetensors"}) {
    const fs::path link = fs::path(path) / name;
    ASSERT_TRUE(fs::is_symlink(link)) << name;
    const std::string target = fs::read_symlink(link).string();
    EXPECT_EQ(target.rfind("../../blobs/", 0), 0u) << target;
    EXPECT_EQ(read_bytes(link), read_bytes(model_ / name)) << name;
  }
  // The LFS file's blob is named by its SHA-256, the others by their git blob id.
  EXPECT_EQ(fs::read_symlink(fs::path(path) / "model.safetensors").filename().string(),
            sha256_of(read_bytes(model_ / "model.safetensors")));
  // Only what a run needs, and nothing left half-done.
  for (const char* name :
       {"EXPECTED.md", "consolidated.safetensors", "original", "pytorch_model.bin"})
    EXPECT_FALSE(fs::exists(fs::path(path) / name)) << name;
  for (const auto& blob : fs::directory_iterator(repo_dir() / "blobs"))
    EXPECT_EQ(blob.path().extension(), "") << blob.path();
  // The safetensors came through the redirect to the "CDN".
  EXPECT_EQ(requests_with("/cdn/").size(), 1u);
}

TEST_F(HubDownload, SecondRunFetchesNothingAndOfflineNeedsNoServer) {
  start();
  const std::string first = resolve_model("tiny/stories", {}, settings_);
  const size_t downloads = requests_with("/resolve/").size();
  EXPECT_EQ(resolve_model("tiny/stories", {}, settings_), first);
  EXPECT_EQ(requests_with("/resolve/").size(), downloads);  // only the file list again

  hub_.reset();  // no server at all
  HubSettings offline = settings_;
  offline.offline = true;
  EXPECT_EQ(resolve_model("tiny/stories", {}, offline), first);
  // Unreachable without HF_HUB_OFFLINE: the cache answers too, as huggingface_hub does.
  EXPECT_EQ(resolve_model("tiny/stories", {}, settings_), first);
  const std::string missing = error_of([&] { resolve_model("tiny/other", {}, settings_); });
  EXPECT_TRUE(contains(missing, "cannot reach " + settings_.endpoint)) << missing;
  EXPECT_TRUE(contains(missing, "HF_HUB_OFFLINE=1")) << missing;
  const std::string offline_missing = error_of([&] { resolve_model("tiny/other", {}, offline); });
  EXPECT_TRUE(contains(offline_missing, "not in the cache")) << offline_missing;
}

// A cache as huggingface_hub writes it (relative links into blobs/, a ref without newline),
// made by hand: Pagoda uses it with no network.
TEST_F(HubDownload, ReusesACacheWrittenByPythonTools) {
  const fs::path repo_dir = fs::path(settings_.cache_dir) / "models--someone--stories";
  const std::string commit = "0123456789abcdef0123456789abcdef01234567";
  for (const char* name : {"config.json", "tokenizer.json", "tokenizer_config.json",
                           "generation_config.json", "model.safetensors"}) {
    const std::string blob = std::string("blob-") + name;
    fs::create_directories(repo_dir / "blobs");
    fs::copy_file(model_ / name, repo_dir / "blobs" / blob);
    fs::create_directories(repo_dir / "snapshots" / commit);
    fs::create_symlink("../../blobs/" + blob, repo_dir / "snapshots" / commit / name);
  }
  write_bytes(repo_dir / "refs/main", commit);
  HubSettings offline = settings_;
  offline.offline = true;
  EXPECT_EQ(resolve_model("someone/stories", {}, offline),
            (repo_dir / "snapshots" / commit).string());
  HubOptions by_commit;
  by_commit.revision = commit;
  EXPECT_EQ(resolve_model("someone/stories", by_commit, offline),
            (repo_dir / "snapshots" / commit).string());

  // A weight file missing from the snapshot: named, not taken as complete.
  fs::remove(repo_dir / "snapshots" / commit / "model.safetensors");
  const std::string error = error_of([&] { resolve_model("someone/stories", {}, offline); });
  EXPECT_TRUE(contains(error, "HF_HUB_OFFLINE")) << error;
}

// A sharded checkpoint: the index first, then exactly the shards it names; offline, a shard
// missing from the snapshot is named.
TEST_F(HubDownload, ShardedCheckpointFetchesTheShardsItsIndexNames) {
  const fs::path sharded = scratch_.dir() / "sharded";
  for (const char* name : {"config.json", "tokenizer.json", "tokenizer_config.json"})
    write_bytes(sharded / name, read_bytes(model_ / name));
  write_bytes(sharded / "model.safetensors.index.json",
              R"({"weight_map": {"a": "model-00001-of-00002.safetensors",
                                 "b": "model-00002-of-00002.safetensors"}})");
  write_bytes(sharded / "model-00001-of-00002.safetensors", "shard one");
  write_bytes(sharded / "model-00002-of-00002.safetensors", "shard two");
  write_bytes(sharded / "model.safetensors", "the same weights, unsharded");
  start({"--repo", "tiny/sharded=" + sharded.string()});
  const fs::path path = resolve_model("tiny/sharded", {}, settings_);
  EXPECT_EQ(read_bytes(path / "model-00001-of-00002.safetensors"), "shard one");
  EXPECT_EQ(read_bytes(path / "model-00002-of-00002.safetensors"), "shard two");
  EXPECT_FALSE(fs::exists(path / "model.safetensors"));

  fs::remove(path / "model-00002-of-00002.safetensors");
  HubSettings offline = settings_;
  offline.offline = true;
  const std::string error = error_of([&] { resolve_model("tiny/sharded", {}, offline); });
  EXPECT_TRUE(contains(error, "lacks model-00002-of-00002.safetensors")) << error;
}

TEST_F(HubDownload, ResumesAfterTheConnectionIsCut) {
  start({"--cut", "model.safetensors:100000"});
  const std::string path = resolve_model("tiny/stories", {}, settings_);
  EXPECT_EQ(read_bytes(fs::path(path) / "model.safetensors"),
            read_bytes(model_ / "model.safetensors"));
  const std::vector<std::string> ranges = requests_with("/cdn/");
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[0], "");
  EXPECT_EQ(ranges[1], "bytes=100000-");  // the second request resumed
}

TEST_F(HubDownload, ResumesAPartialFileLeftByAnEarlierRun) {
  start();
  const std::string weights = read_bytes(model_ / "model.safetensors");
  write_bytes(repo_dir() / "blobs" / (sha256_of(weights) + ".incomplete"), weights.substr(0, 5000));
  const std::string path = resolve_model("tiny/stories", {}, settings_);
  EXPECT_EQ(read_bytes(fs::path(path) / "model.safetensors"), weights);
  EXPECT_EQ(requests_with("/cdn/"), std::vector<std::string>{"bytes=5000-"});
}

TEST_F(HubDownload, WrongChecksumIsAnErrorAndNothingIsKept) {
  start({"--corrupt", "model.safetensors"});
  const std::string error = error_of([&] { resolve_model("tiny/stories", {}, settings_); });
  EXPECT_TRUE(contains(error, "checksum mismatch for model.safetensors of tiny/stories")) << error;
  EXPECT_TRUE(contains(error, "deleted")) << error;
  const std::string sha = sha256_of(read_bytes(model_ / "model.safetensors"));
  EXPECT_FALSE(fs::exists(repo_dir() / "blobs" / sha));
  EXPECT_FALSE(fs::exists(repo_dir() / "blobs" / (sha + ".incomplete")));
  EXPECT_FALSE(fs::exists(repo_dir() / "refs/main"));  // no revision points at it
  HubSettings offline = settings_;
  offline.offline = true;
  EXPECT_THROW(resolve_model("tiny/stories", {}, offline), Error);
}

TEST_F(HubDownload, MissingRepoAndRevision) {
  start();
  const std::string error = error_of([&] { resolve_model("tiny/nope", {}, settings_); });
  EXPECT_TRUE(contains(error, "repository tiny/nope not found on " + settings_.endpoint)) << error;
  HubOptions revision;
  revision.revision = "v9";
  const std::string bad_revision =
      error_of([&] { resolve_model("tiny/stories", revision, settings_); });
  EXPECT_TRUE(contains(bad_revision, "revision v9 not found")) << bad_revision;
}

TEST_F(HubDownload, GatedRepoNeedsAToken) {
  start({"--repo", "tiny/gated=" + repo_.string(), "--gated", "tiny/gated", "--token", "hf_ok"});
  const std::string error = error_of([&] { resolve_model("tiny/gated", {}, settings_); });
  EXPECT_TRUE(contains(error, "gated")) << error;
  EXPECT_TRUE(contains(error, "HF_TOKEN")) << error;
  settings_.token = "hf_wrong";
  const std::string refused = error_of([&] { resolve_model("tiny/gated", {}, settings_); });
  EXPECT_TRUE(contains(refused, "refused the token")) << refused;
  EXPECT_TRUE(contains(refused, "401")) << refused;
  settings_.token = "hf_ok";
  const std::string path = resolve_model("tiny/gated", {}, settings_);
  EXPECT_TRUE(fs::exists(fs::path(path) / "config.json"));
  settings_.token = "";  // fetched once with a token, the cached copy serves without one
  EXPECT_EQ(resolve_model("tiny/gated", {}, settings_), path);
}

TEST_F(HubDownload, GgufFileByQuantTag) {
  if (tiny_gguf().empty()) GTEST_SKIP() << "testdata models/llama-2-tiny-random is absent";
  const fs::path gguf_repo = scratch_.dir() / "gguf-repo";
  fs::create_directories(gguf_repo);
  fs::create_symlink(tiny_gguf(), gguf_repo / "tiny-Q4_K_M.gguf");
  write_bytes(gguf_repo / "tiny-Q8_0.gguf", "not this one");
  write_bytes(gguf_repo / "mmproj-Q4_K_M.gguf", "nor this");
  start({"--repo", "tiny/gguf=" + gguf_repo.string()});
  const std::string path = resolve_model("tiny/gguf:Q4_K_M", {}, settings_);
  EXPECT_EQ(fs::path(path).filename(), "tiny-Q4_K_M.gguf");
  EXPECT_EQ(read_bytes(path), read_bytes(tiny_gguf()));
  std::vector<std::string> in_snapshot;
  for (const auto& e : fs::directory_iterator(fs::path(path).parent_path()))
    in_snapshot.push_back(e.path().filename().string());
  EXPECT_EQ(in_snapshot, std::vector<std::string>{"tiny-Q4_K_M.gguf"});

  HubOptions by_name;
  by_name.gguf_file = "tiny-Q8_0.gguf";
  EXPECT_EQ(read_bytes(resolve_model("tiny/gguf", by_name, settings_)), "not this one");
}

TEST_F(HubDownload, AFullDiskIsAnError) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full to stand for a full disk";
  start();
  // The partial file leads to /dev/full, where every write fails with ENOSPC.
  const std::string sha = sha256_of(read_bytes(model_ / "model.safetensors"));
  fs::create_directories(repo_dir() / "blobs");
  fs::create_symlink("/dev/full", repo_dir() / "blobs" / (sha + ".incomplete"));
  const std::string error = error_of([&] { resolve_model("tiny/stories", {}, settings_); });
  EXPECT_TRUE(contains(error, "No space left on device")) << error;
  EXPECT_FALSE(fs::exists(repo_dir() / "refs/main"));
}

TEST_F(HubDownload, ModelScopeApi) {
  start();
  settings_.source = HubSource::kModelScope;
  const std::string path = resolve_model("tiny/stories", {}, settings_);
  EXPECT_EQ(read_bytes(fs::path(path) / "model.safetensors"),
            read_bytes(model_ / "model.safetensors"));
  EXPECT_FALSE(requests_with("/api/v1/models/tiny/stories/repo").empty());
  EXPECT_TRUE(fs::exists(repo_dir() / "refs/master"));
}

TEST(HubResolve, LocalPathsAndDemoPassThrough) {
  HubSettings nowhere;
  nowhere.endpoint = "http://127.0.0.1:9";
  EXPECT_EQ(resolve_model("demo", {}, nowhere), "demo");
  EXPECT_EQ(resolve_model("/no/such/dir", {}, nowhere), "/no/such/dir");
  const fs::path here = fs::temp_directory_path();
  EXPECT_EQ(resolve_model(here.string(), {}, nowhere), here.string());
}

}  // namespace
}  // namespace pagoda::hub
