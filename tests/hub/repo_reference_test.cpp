// `org/name[:TAG]` parsing and the environment the hub settings come from.
#include <gtest/gtest.h>

#include <cstdlib>

#include "hub/hub_settings.h"
#include "hub/repo_reference.h"
#include "util/error.h"

namespace pagoda::hub {
namespace {

TEST(RepoReference, ParsesRepoIdsAndQuantTags) {
  const auto plain = parse_repo_reference("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->repo_id, "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B");
  EXPECT_EQ(plain->quant_tag, "");
  const auto tagged = parse_repo_reference("unsloth/Qwen3-0.6B-GGUF:Q4_K_M");
  ASSERT_TRUE(tagged);
  EXPECT_EQ(tagged->repo_id, "unsloth/Qwen3-0.6B-GGUF");
  EXPECT_EQ(tagged->quant_tag, "Q4_K_M");
}

TEST(RepoReference, PathsAreNotRepoIds) {
  for (const char* text : {"/models/x", "./x/y", "x", "a/b/c", "../a", "a/b.gguf", "org/", "/b",
                           "a/b:", "a b/c", "org/.hidden", "a--b/c", "a/b..c", "demo"}) {
    EXPECT_FALSE(parse_repo_reference(text)) << text;
  }
}

TEST(RepoReference, CommitHashes) {
  EXPECT_TRUE(is_commit_hash("0123456789abcdef0123456789abcdef01234567"));
  EXPECT_FALSE(is_commit_hash("main"));
  EXPECT_FALSE(is_commit_hash("0123456789ABCDEF0123456789abcdef01234567"));
  EXPECT_EQ(default_revision("", false), "main");
  EXPECT_EQ(default_revision("", true), "master");
  EXPECT_EQ(default_revision("v1.0", false), "v1.0");
}

// Sets variables for one test and restores them afterwards.
class Environment {
 public:
  void set(const char* name, const char* value) {
    const char* old = std::getenv(name);
    saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
    if (value == nullptr) {
      ::unsetenv(name);
    } else {
      ::setenv(name, value, 1);
    }
  }
  ~Environment() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second) {
        ::setenv(it->first.c_str(), it->second->c_str(), 1);
      } else {
        ::unsetenv(it->first.c_str());
      }
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST(HubSettings, ReadsHuggingFaceHubVariables) {
  Environment env;
  for (const char* name :
       {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN",
        "HF_TOKEN_PATH", "TRANSFORMERS_OFFLINE", "VLLM_USE_MODELSCOPE", "XDG_CACHE_HOME"})
    env.set(name, nullptr);
  env.set("HOME", "/home/someone");
  env.set("HF_HOME", nullptr);
  env.set("HF_ENDPOINT", nullptr);
  env.set("HF_HUB_OFFLINE", nullptr);
  HubSettings s = hub_settings_from_environment();
  EXPECT_EQ(s.endpoint, "https://huggingface.co");
  EXPECT_EQ(s.cache_dir, "/home/someone/.cache/huggingface/hub");
  EXPECT_FALSE(s.offline);

  env.set("HF_HOME", "/data/hf");
  env.set("HF_ENDPOINT", "https://hf-mirror.com/");
  env.set("HF_HUB_OFFLINE", "1");
  env.set("HF_TOKEN", " hf_abc\n");
  s = hub_settings_from_environment();
  EXPECT_EQ(s.endpoint, "https://hf-mirror.com");
  EXPECT_EQ(s.cache_dir, "/data/hf/hub");
  EXPECT_TRUE(s.offline);
  EXPECT_EQ(s.token, "hf_abc");
  env.set("HF_HUB_CACHE", "/fast/cache");
  EXPECT_EQ(hub_settings_from_environment().cache_dir, "/fast/cache");

  env.set("HF_HUB_OFFLINE", "maybe");
  EXPECT_THROW(hub_settings_from_environment(), Error);
}

TEST(HubSettings, ModelScopeByVllmsVariable) {
  Environment env;
  env.set("VLLM_USE_MODELSCOPE", "True");
  env.set("MODELSCOPE_ENDPOINT", nullptr);
  env.set("MODELSCOPE_CACHE", "/ms");
  const HubSettings s = hub_settings_from_environment();
  EXPECT_EQ(s.source, HubSource::kModelScope);
  EXPECT_EQ(s.endpoint, "https://www.modelscope.cn");
  EXPECT_EQ(s.cache_dir, "/ms/hub");
}

}  // namespace
}  // namespace pagoda::hub
