// Shared helpers for the tokenizer tests: where the shared test data lives and small readers.
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/test_paths.h"

namespace pagoda::testing {

inline std::filesystem::path testdata_dir() {
  return pagoda::test::testdata_dir();
}

inline std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Directories of the tokenizers we have a tokenizer.json for, by short name.
struct TokenizerDir {
  const char* name;
  const char* relative_dir;
};
inline constexpr TokenizerDir kTokenizerDirs[] = {
    {"deepseek-v3", "tokenizers/deepseek-v3"},
    {"deepseek-llm", "derived/deepseek-llm-tokenizer-from-gguf"},
    {"deepseek-coder", "derived/deepseek-coder-tokenizer-from-gguf"},
    {"qwen3", "tokenizers/qwen3"},
    {"llama3", "tokenizers/llama3"},
    {"stories260K", "models/stories260K-hf"},
};

}  // namespace pagoda::testing
