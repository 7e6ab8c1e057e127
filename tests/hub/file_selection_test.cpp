// Which files of a repository a run fetches: one weight format, the configs and tokenizer, or
// one GGUF file by tag or name.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "hub/file_selection.h"
#include "util/error.h"

namespace pagoda::hub {
namespace {

using Files = std::vector<std::string>;

TEST(FileSelection, OneSafetensorsFormatWithConfigsAndTokenizer) {
  const Files repo = {"README.md",
                      "config.json",
                      "generation_config.json",
                      "tokenizer.json",
                      "tokenizer_config.json",
                      "model.safetensors",
                      "consolidated.safetensors",
                      "original/model.safetensors",
                      "pytorch_model.bin",
                      "model-Q4_K_M.gguf",
                      ".gitattributes"};
  const Selection s = select_files(repo, {}, "org/name");
  EXPECT_EQ(s.files, (Files{"tokenizer.json", "tokenizer_config.json", "config.json",
                            "generation_config.json", "model.safetensors"}));
  EXPECT_EQ(s.gguf_file, "");
}

TEST(FileSelection, ShardedCheckpointStartsWithItsIndex) {
  const Files repo = {"config.json",
                      "tokenizer.json",
                      "model.safetensors.index.json",
                      "model-00001-of-00002.safetensors",
                      "model-00002-of-00002.safetensors",
                      "consolidated.safetensors"};
  const Selection s = select_files(repo, {}, "org/name");
  EXPECT_EQ(s.files, (Files{"tokenizer.json", "config.json", "model.safetensors.index.json"}));
  EXPECT_EQ(index_file(s.files), "model.safetensors.index.json");

  const std::filesystem::path index =
      std::filesystem::temp_directory_path() / ("pagoda-index-" + std::to_string(::getpid()));
  std::ofstream(index)
      << R"({"metadata": {}, "weight_map": {"a": "model-00002-of-00002.safetensors",
      "b": "model-00001-of-00002.safetensors", "c": "model-00001-of-00002.safetensors"}})";
  EXPECT_EQ(shards_of_index(index.string(), "model.safetensors.index.json"),
            (Files{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}));
  EXPECT_EQ(
      shards_of_index(index.string(), "sub/model.safetensors.index.json"),
      (Files{"sub/model-00001-of-00002.safetensors", "sub/model-00002-of-00002.safetensors"}));
  std::filesystem::remove(index);
}

TEST(FileSelection, GgufByTagByNameOrDefault) {
  const Files repo = {"README.md",
                      "m-Q4_K.gguf",
                      "m-Q4_K_M.gguf",
                      "m-Q8_0.gguf",
                      "mmproj-Q4_K_M.gguf",
                      "big/m-Q2_K-00001-of-00002.gguf",
                      "big/m-Q2_K-00002-of-00002.gguf"};
  SelectionRequest tag;
  tag.quant_tag = "q4_k_m";  // case does not matter, as in llama.cpp
  EXPECT_EQ(select_files(repo, tag, "o/n").files, Files{"m-Q4_K_M.gguf"});
  tag.quant_tag = "Q4_K";  // a whole tag, not a prefix of Q4_K_M
  EXPECT_EQ(select_files(repo, tag, "o/n").gguf_file, "m-Q4_K.gguf");
  tag.quant_tag = "Q5_K_S";
  try {
    select_files(repo, tag, "o/n");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no GGUF file for the tag Q5_K_S"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("m-Q8_0.gguf"), std::string::npos) << e.what();
  }
  tag.quant_tag = "Q2_K";  // only split files
  EXPECT_THROW(select_files(repo, tag, "o/n"), Error);

  SelectionRequest by_name;
  by_name.gguf_file = "m-Q8_0.gguf";
  EXPECT_EQ(select_files(repo, by_name, "o/n").files, Files{"m-Q8_0.gguf"});
  by_name.gguf_file = "absent.gguf";
  EXPECT_THROW(select_files(repo, by_name, "o/n"), Error);

  // No safetensors: llama.cpp's default quantization.
  EXPECT_EQ(select_files(repo, {}, "o/n").gguf_file, "m-Q4_K_M.gguf");
}

TEST(FileSelection, IncludeGlobsAndTokenizerOnly) {
  const Files repo = {"config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors",
                      "sub/a.json"};
  SelectionRequest include;
  include.include = {"*.json"};
  EXPECT_EQ(select_files(repo, include, "o/n").files,
            (Files{"config.json", "tokenizer.json", "tokenizer_config.json", "sub/a.json"}));
  include.include = {"*.bin"};
  EXPECT_THROW(select_files(repo, include, "o/n"), Error);

  SelectionRequest tokenizer;
  tokenizer.purpose = Purpose::kTokenizer;
  EXPECT_EQ(select_files(repo, tokenizer, "o/n").files,
            (Files{"tokenizer.json", "tokenizer_config.json"}));
}

TEST(FileSelection, NothingPagodaReadsIsAnError) {
  try {
    select_files({"config.json", "pytorch_model.bin"}, {}, "o/n");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("o/n"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pagoda::hub
