// Streaming detokenization: the concatenated deltas equal the full decode, every delta is
// complete UTF-8, and text once emitted is never revised (the deltas are only ever appended).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "tests/tokenizer/testdata.h"
#include "tokenizer/incremental_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace pagoda {
namespace {

using pagoda::testing::testdata_dir;

const Tokenizer* load(const std::string& relative_dir) {
  static std::map<std::string, Tokenizer> cache;
  const auto dir = testdata_dir() / relative_dir;
  if (!std::filesystem::exists(dir / "tokenizer.json")) return nullptr;
  auto it = cache.find(relative_dir);
  if (it == cache.end()) it = cache.emplace(relative_dir, Tokenizer::from_directory(dir)).first;
  return &it->second;
}

const std::vector<std::string> kTexts = {
    "Once upon a time, there was a little girl named Lily.",
    "深度求索 DeepSeek 人工智能 — 你好，世界！",
    "emoji: 👨‍👩‍👧‍👦 🏳️‍🌈 👍🏽 🇨🇳 and café naïve Zürich",
    "def f(x):\n    return x ** 2  # 平方\n\n\n",
    "   leading spaces and trailing   ",
    "ជំរាបសួរ Ελλάδα Москва مرحبا नमस्ते 한국어 こんにちは",
    "\xE2\x96\x81 literal marker and <0x41> text",
};

// Streams `ids` through an IncrementalDecoder and checks the deltas.
std::string stream(const Tokenizer& tok, const std::vector<TokenId>& prompt,
                   const std::vector<TokenId>& generated, bool skip_special) {
  IncrementalDecoder decoder(tok, skip_special, prompt);
  std::string text;
  for (const TokenId id : generated) {
    const std::string delta = decoder.step(id);
    EXPECT_TRUE(is_valid_utf8(delta));
    EXPECT_EQ(incomplete_utf8_suffix(delta), 0u);
    text += delta;
  }
  text += decoder.finish();
  return text;
}

class IncrementalDecode : public ::testing::TestWithParam<const char*> {};

TEST_P(IncrementalDecode, DeltasConcatenateToFullDecode) {
  const Tokenizer* tok = load(GetParam());
  if (tok == nullptr) GTEST_SKIP() << GetParam() << " missing";
  for (const std::string& text : kTexts) {
    const auto ids = tok->encode(text, true);
    for (const bool skip : {true, false}) {
      EXPECT_EQ(stream(*tok, {}, ids, skip), tok->decode(ids, skip)) << text;
    }
    // With a prompt as context: the generated part decodes to the text after the prompt.
    if (ids.size() > 6) {
      const std::vector<TokenId> prompt(ids.begin(), ids.begin() + 6);
      const std::vector<TokenId> generated(ids.begin() + 6, ids.end());
      const std::string full = tok->decode(ids, true);
      const std::string head = tok->decode(prompt, true);
      if (full.compare(0, head.size(), head) == 0) {
        EXPECT_EQ(stream(*tok, prompt, generated, true), full.substr(head.size())) << text;
      }
    }
  }
}

TEST_P(IncrementalDecode, RandomIdsNeverEmitBrokenUtf8) {
  const Tokenizer* tok = load(GetParam());
  if (tok == nullptr) GTEST_SKIP() << GetParam() << " missing";
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<TokenId> ids(1 + rng() % 30);
    for (TokenId& id : ids) id = static_cast<TokenId>(rng() % tok->vocab_size());
    const std::string text = stream(*tok, {}, ids, trial % 2 == 0);
    EXPECT_TRUE(is_valid_utf8(text));
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, IncrementalDecode,
                         ::testing::Values("models/stories260K-hf", "tokenizers/deepseek-v3",
                                           "tokenizers/qwen3"),
                         [](const auto& info) {
                           std::string name = info.param;
                           name = name.substr(name.find('/') + 1);
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

// A character split over byte-fallback tokens is held back until it is complete.
TEST(IncrementalDecodeBytes, HoldsPartialCharacters) {
  const Tokenizer* tok = load("models/stories260K-hf");
  if (tok == nullptr) GTEST_SKIP() << "stories260K-hf missing";
  const auto ids = tok->encode("a😀", false);  // ▁a, then <0xF0> <0x9F> <0x98> <0x80>
  ASSERT_EQ(ids.size(), 5u);
  IncrementalDecoder decoder(*tok, true);
  EXPECT_EQ(decoder.step(ids[0]), "a");
  EXPECT_EQ(decoder.step(ids[1]), "");
  EXPECT_EQ(decoder.step(ids[2]), "");
  EXPECT_EQ(decoder.step(ids[3]), "");
  EXPECT_EQ(decoder.step(ids[4]), "😀");
  EXPECT_EQ(decoder.finish(), "");
  // A dangling partial character comes out at finish() as U+FFFD.
  IncrementalDecoder cut(*tok, true);
  EXPECT_EQ(cut.step(ids[0]), "a");
  EXPECT_EQ(cut.step(ids[1]), "");
  EXPECT_EQ(cut.finish(), "\xEF\xBF\xBD");
}

// SentencePiece: "▁world" keeps its space after earlier text, even across window slides.
TEST(IncrementalDecodeBytes, SentencePieceSpacesSurviveTheWindow) {
  const Tokenizer* tok = load("models/stories260K-hf");
  if (tok == nullptr) GTEST_SKIP() << "stories260K-hf missing";
  const std::string text = "Sam had a red ball. He liked to play with his toys.";
  const auto ids = tok->encode(text, true);
  IncrementalDecoder decoder(*tok, true);
  std::vector<std::string> deltas;
  for (const TokenId id : ids) deltas.push_back(decoder.step(id));
  std::string joined;
  for (const auto& d : deltas) joined += d;
  EXPECT_EQ(joined + decoder.finish(), text);
  // The delta for "▁had" (not the first token of any window) carries its space.
  const auto had = tok->token_to_id("\xE2\x96\x81had");
  ASSERT_TRUE(had.has_value());
  const size_t at = std::find(ids.begin(), ids.end(), *had) - ids.begin();
  ASSERT_LT(at, ids.size());
  EXPECT_EQ(deltas[at], " had");
}

}  // namespace
}  // namespace pagoda
