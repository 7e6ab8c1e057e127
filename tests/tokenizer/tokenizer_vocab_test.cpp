// Exactness against published reference ids: llama.cpp's tokenizer test vectors
// (llama.cpp-vocab/*.inp/*.out, ids from HF transformers without BOS), transformers.js's
// tokenization cases, and the stories260K prompts / generations.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "tests/tokenizer/testdata.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

using pagoda::testing::read_text_file;
using pagoda::testing::testdata_dir;

const Tokenizer& load(const std::string& relative_dir) {
  static std::map<std::string, Tokenizer> cache;
  auto it = cache.find(relative_dir);
  if (it == cache.end()) {
    it =
        cache.emplace(relative_dir, Tokenizer::from_directory(testdata_dir() / relative_dir)).first;
  }
  return it->second;
}

bool have(const std::string& relative_path) {
  return std::filesystem::exists(testdata_dir() / relative_path);
}

std::vector<TokenId> parse_ids(const std::string& line) {
  std::vector<TokenId> ids;
  std::istringstream in(line);
  TokenId id;
  while (in >> id) ids.push_back(id);
  return ids;
}

struct VocabCase {
  const char* vocab;          // llama.cpp-vocab/ggml-vocab-<vocab>.gguf.{inp,out}
  const char* tokenizer_dir;  // our tokenizer.json for it
};

class LlamaCppVocab : public ::testing::TestWithParam<VocabCase> {};

TEST_P(LlamaCppVocab, MatchesEveryCase) {
  const VocabCase& c = GetParam();
  const std::string base = std::string("llama.cpp-vocab/ggml-vocab-") + c.vocab + ".gguf";
  if (!have(base + ".inp") || !have(std::string(c.tokenizer_dir) + "/tokenizer.json")) {
    GTEST_SKIP() << "test data missing under " << testdata_dir();
  }
  const Tokenizer& tok = load(c.tokenizer_dir);
  const std::string inp = read_text_file(testdata_dir() / (base + ".inp"));
  const std::string out = read_text_file(testdata_dir() / (base + ".out"));
  const std::string separator = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  size_t pos = 0;
  for (size_t next; (next = inp.find(separator, pos)) != std::string::npos;
       pos = next + separator.size()) {
    texts.push_back(inp.substr(pos, next - pos));
  }
  std::vector<std::string> lines;
  std::istringstream out_stream(out);
  for (std::string line; std::getline(out_stream, line);) lines.push_back(line);
  ASSERT_EQ(texts.size(), 46u);
  ASSERT_EQ(lines.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(tok.encode(texts[i], false), parse_ids(lines[i]))
        << c.vocab << " case " << i << ": '" << texts[i] << "'";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Tokenizers, LlamaCppVocab,
    ::testing::Values(VocabCase{"deepseek-llm", "derived/deepseek-llm-tokenizer-from-gguf"},
                      VocabCase{"deepseek-coder", "derived/deepseek-coder-tokenizer-from-gguf"},
                      VocabCase{"qwen2", "tokenizers/qwen3"},
                      VocabCase{"llama-bpe", "tokenizers/llama3"}),
    [](const auto& info) {
      std::string name = info.param.vocab;
      for (char& ch : name) {
        if (ch == '-') ch = '_';
      }
      return name;
    });

// transformers.js cases: ids made with add_special_tokens=true; "decoded" is decode(ids).
TEST(TransformersJsCases, MatchForTokenizersWeHave) {
  const std::string cases_path = "tokenizer-expected/transformersjs-tokenization-cases.json";
  if (!have(cases_path)) GTEST_SKIP() << "test data missing under " << testdata_dir();
  const auto cases = nlohmann::json::parse(read_text_file(testdata_dir() / cases_path));
  const std::map<std::string, std::string> ours = {
      {"Xenova/deepseek-coder-1.3b-instruct", "derived/deepseek-coder-tokenizer-from-gguf"},
      {"Xenova/llama3-tokenizer", "tokenizers/llama3"},
      {"Xenova/Qwen1.5-0.5B-Chat", "tokenizers/qwen3"},
  };
  size_t checked = 0;
  for (const auto& [model, dir] : ours) {
    ASSERT_TRUE(cases.contains(model)) << model;
    const Tokenizer& tok = load(dir);
    for (const auto& c : cases[model]) {
      const auto text = c["text"].get<std::string>();
      const auto expected = c["ids"].get<std::vector<TokenId>>();
      EXPECT_EQ(tok.encode(text, true), expected) << model << " " << c["name"];
      // transformers' decode also applies clean_up_tokenization_spaces when the config asks.
      std::string decoded = tok.decode(expected, false);
      if (tok.clean_up_tokenization_spaces()) decoded = clean_up_tokenization(decoded);
      EXPECT_EQ(decoded, c["decoded"].get<std::string>()) << model << " " << c["name"];
      ++checked;
    }
  }
  EXPECT_EQ(checked, 37u + 37u + 25u);
}

// The stories260K prompts of EXPECTED.md, encoded with BOS.
TEST(Stories260K, PromptIdsFromExpectedMd) {
  if (!have("models/stories260K-hf/tokenizer.json")) GTEST_SKIP() << "stories260K-hf missing";
  const Tokenizer& tok = load("models/stories260K-hf");
  EXPECT_EQ(tok.encode("Once upon a time", true), (std::vector<TokenId>{1, 403, 407, 261, 378}));
  EXPECT_EQ(tok.encode("Sam had a red ball.", true),
            (std::vector<TokenId>{1, 301, 314, 381, 261, 352, 266, 268, 388, 426}));
  EXPECT_EQ(tok.encode("The sun was shining and", true),
            (std::vector<TokenId>{1, 291, 262, 379, 286, 262, 415, 271, 299, 269}));
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(tok.model_max_length(), 512);
  EXPECT_EQ(tok.vocab_size(), 512u);
}

// Decoding karpathy's generations gives the published text, and encoding that text gives the ids.
TEST(Stories260K, GenerationsRoundTrip) {
  const std::string ids_path = "models/stories260K/expected_token_ids.derived.json";
  if (!have(ids_path) || !have("models/stories260K-hf/tokenizer.json")) {
    GTEST_SKIP() << "stories260K data missing";
  }
  const Tokenizer& tok = load("models/stories260K-hf");
  const auto runs = nlohmann::json::parse(read_text_file(testdata_dir() / ids_path));
  const std::map<std::string, std::string> texts = {
      {"greedy_steps200", "greedy_steps200.expected.txt"},
      {"greedy_steps256", "greedy_steps256.expected.txt"},
      {"sample_t1.0_p0.9_seed133742_steps256", "sample_t1.0_p0.9_seed133742_steps256.expected.txt"},
  };
  size_t checked = 0;
  for (const auto& [key, file] : texts) {
    if (!runs.contains(key)) continue;
    const auto ids = runs[key].get<std::vector<TokenId>>();
    std::string expected = read_text_file(testdata_dir() / "models/stories260K" / file);
    const std::string decoded = tok.decode(ids, true);
    // The .txt files may end with the newline run.c prints after the story.
    while (!expected.empty() && expected.back() == '\n' &&
           (decoded.empty() || decoded.back() != '\n')) {
      expected.pop_back();
    }
    EXPECT_EQ(decoded, expected) << key;
    EXPECT_EQ(tok.encode(decoded, true), ids) << key;
    ++checked;
  }
  EXPECT_GE(checked, 2u);
}

// DeepSeek-V3: no .out file exists; check the pieces of its special-token handling that the
// config decides (BOS added by LlamaTokenizerFast, special tokens never split).
TEST(DeepSeekV3, ConfigDrivenSpecialTokens) {
  if (!have("tokenizers/deepseek-v3/tokenizer.json")) GTEST_SKIP() << "deepseek-v3 missing";
  const Tokenizer& tok = load("tokenizers/deepseek-v3");
  EXPECT_EQ(tok.bos_id(), 0);
  EXPECT_EQ(tok.eos_id(), 1);
  EXPECT_EQ(tok.bos_token(), "<｜begin▁of▁sentence｜>");
  EXPECT_EQ(tok.model_max_length(), 131072);
  EXPECT_FALSE(tok.chat_template().empty());
  const auto plain = tok.encode("Hello", false);
  const auto with_bos = tok.encode("Hello", true);
  ASSERT_EQ(with_bos.size(), plain.size() + 1);
  EXPECT_EQ(with_bos[0], 0);
  // In this tokenizer.json <｜User｜>/<｜Assistant｜> are added but not special; EOS is special.
  const auto ids = tok.encode("<｜User｜>hi<｜Assistant｜>ok<｜end▁of▁sentence｜>", false);
  ASSERT_GE(ids.size(), 5u);
  EXPECT_EQ(ids.front(), 128803);
  EXPECT_EQ(ids[ids.size() - 3], 128804);
  EXPECT_EQ(ids.back(), 1);
  EXPECT_FALSE(tok.is_special(128803));
  EXPECT_TRUE(tok.is_special(1));
  EXPECT_EQ(tok.decode(ids, true), "<｜User｜>hi<｜Assistant｜>ok");
  EXPECT_EQ(tok.decode(ids, false), "<｜User｜>hi<｜Assistant｜>ok<｜end▁of▁sentence｜>");
  EXPECT_EQ(tok.vocab_size(), 128815u);
}

}  // namespace
}  // namespace pagoda
