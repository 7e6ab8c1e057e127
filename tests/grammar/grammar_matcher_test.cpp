// The matcher on a real vocabulary (a few thousand DeepSeek-V3 tokens): every mask must equal the
// brute-force answer (each token's bytes run through the automaton by accept_token), for every
// grammar kind, along random token walks; rollback restores earlier masks exactly; stop tokens
// and termination; the compiled-grammar cache; the lazily filled mask cache under threads.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/test_paths.h"
#include "grammar/grammar_compiler.h"
#include "grammar/grammar_matcher.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace pagoda::grammar {
namespace {

// Token bytes of DeepSeek-V3's byte-level BPE vocabulary, thinned to ~4,600 tokens (every id
// below 2,600, then every 60th) and renumbered; the last id is a stop token.
std::shared_ptr<const Vocabulary> deepseek_vocabulary() {
  static const std::shared_ptr<const Vocabulary> vocab = []() -> std::shared_ptr<const Vocabulary> {
    const auto path = pagoda::test::testdata_dir() / "tokenizers/deepseek-v3/tokenizer.json";
    std::ifstream in(path);
    if (!in) return nullptr;
    const auto json = nlohmann::json::parse(in);
    std::vector<std::pair<int, std::string>> tokens;
    for (const auto& [piece, id] : json["model"]["vocab"].items()) {
      const int token_id = id.get<int>();
      if (token_id >= 2600 && token_id % 60 != 0) continue;
      std::string bytes;
      size_t pos = 0;
      bool ok = true;
      while (pos < piece.size()) {
        const int b = byte_level_byte(next_code_point(piece, pos));
        if (b < 0) ok = false;
        bytes += static_cast<char>(b);
      }
      if (ok) tokens.emplace_back(token_id, bytes);
    }
    std::sort(tokens.begin(), tokens.end());
    std::vector<std::string> token_bytes;
    for (auto& [id, bytes] : tokens) token_bytes.push_back(std::move(bytes));
    token_bytes.emplace_back();  // stop
    const auto stop = static_cast<int32_t>(token_bytes.size() - 1);
    return std::make_shared<const Vocabulary>(std::move(token_bytes), std::vector<int32_t>{stop});
  }();
  return vocab;
}

std::vector<uint32_t> brute_force_mask(GrammarMatcher& matcher) {
  const Vocabulary& vocab = matcher.grammar().vocabulary();
  std::vector<uint32_t> mask(vocab.mask_words(), 0);
  for (int32_t id = 0; id < static_cast<int32_t>(vocab.size()); ++id) {
    if (matcher.accept_token(id)) {
      set_bit(mask, id);
      EXPECT_TRUE(matcher.rollback(1));
    }
  }
  return mask;
}

std::vector<uint32_t> engine_mask(GrammarMatcher& matcher) {
  std::vector<uint32_t> mask(matcher.grammar().vocabulary().mask_words());
  matcher.fill_next_token_bitmask(mask);
  return mask;
}

std::string first_difference(const std::vector<uint32_t>& got, const std::vector<uint32_t>& want,
                             const Vocabulary& vocab) {
  for (int32_t id = 0; id < static_cast<int32_t>(vocab.size()); ++id) {
    if (test_bit(got, id) != test_bit(want, id)) {
      return "token " + std::to_string(id) + " '" + vocab.bytes(id) +
             "' engine=" + std::to_string(test_bit(got, id)) +
             " brute force=" + std::to_string(test_bit(want, id));
    }
  }
  return "";
}

std::vector<int32_t> allowed_ids(const std::vector<uint32_t>& mask, size_t vocab_size) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < static_cast<int32_t>(vocab_size); ++id) {
    if (test_bit(mask, id)) ids.push_back(id);
  }
  return ids;
}

class MatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    vocab_ = deepseek_vocabulary();
    if (!vocab_) GTEST_SKIP() << "no tokenizers/deepseek-v3/tokenizer.json in the test data";
    compiler_ = std::make_unique<GrammarCompiler>(vocab_);
  }

  std::vector<std::shared_ptr<const CompiledGrammar>> grammars_of_every_kind() {
    return {
        compiler_->json_schema(
            R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},"age":{"type":"integer","minimum":0,"maximum":150},"tags":{"type":"array","items":{"enum":["a","bc","def"]},"maxItems":3}},"required":["name","age"],"additionalProperties":false})"),
        compiler_->json_schema(
            R"({"$defs":{"t":{"type":"object","properties":{"v":{"type":"number"},"kids":{"type":"array","items":{"$ref":"#/$defs/t"}}},"required":["v","kids"]}},"$ref":"#/$defs/t"})"),
        compiler_->json_schema(
            R"({"type":"object","properties":{"when":{"type":"string","format":"date-time"},"id":{"type":"string","format":"uuid"},"note":{"type":"string","pattern":"^[A-Z][a-z ]+\\.$"}},"required":["when","id","note"]})",
            {.any_whitespace = true}),
        compiler_->json_object(),
        // Unrolled repetitions, where states share cache entries (state_classes.h).
        compiler_->json_schema(
            R"({"type":"object","properties":{"s":{"type":"string","minLength":3,"maxLength":30},"n":{"type":"array","items":{"type":"integer"},"maxItems":12}},"required":["s","n"]})"),
        compiler_->regex("[a-z ]{5,80}"),
        compiler_->regex("(\\+1 )?\\(\\d{3}\\) \\d{3}-\\d{4}|[a-z]+@[a-z]+\\.(com|org)"),
        compiler_->choice({"positive", "negative", "neutral", "pos"}),
        compiler_->ebnf(R"(
          root ::= "SELECT " cols " FROM " name (" WHERE " name " = " value)? ";"
          cols ::= "*" | name (", " name)*
          name ::= [a-z_] [a-z_0-9]*
          value ::= [0-9]+ | "'" [^']* "'"
        )"),
    };
  }

  std::shared_ptr<const Vocabulary> vocab_;
  std::unique_ptr<GrammarCompiler> compiler_;
};

TEST_F(MatcherTest, MasksEqualBruteForceAlongRandomWalks) {
  std::mt19937 rng(7);
  const int32_t stop = vocab_->stop_token_ids()[0];
  int kind = 0;
  for (const auto& grammar : grammars_of_every_kind()) {
    SCOPED_TRACE("grammar kind " + std::to_string(kind++));
    for (int walk = 0; walk < 3; ++walk) {
      GrammarMatcher matcher(grammar);
      for (int step = 0; step < 40 && !matcher.is_terminated(); ++step) {
        const auto got = engine_mask(matcher);
        const auto want = brute_force_mask(matcher);
        ASSERT_EQ(first_difference(got, want, *vocab_), "") << "walk " << walk << " step " << step;
        const auto ids = allowed_ids(got, vocab_->size());
        ASSERT_FALSE(ids.empty()) << "dead end at step " << step;
        const bool stop_now = test_bit(got, stop) && rng() % 3 == 0;
        const int32_t next = stop_now ? stop : ids[rng() % ids.size()];
        ASSERT_TRUE(matcher.accept_token(next));
      }
    }
  }
}

TEST_F(MatcherTest, RollbackRestoresEarlierMasks) {
  std::mt19937 rng(11);
  for (const auto& grammar : grammars_of_every_kind()) {
    GrammarMatcher matcher(grammar);
    std::vector<std::vector<uint32_t>> masks;
    for (int step = 0; step < 25; ++step) {
      masks.push_back(engine_mask(matcher));
      auto ids = allowed_ids(masks.back(), vocab_->size());
      std::erase(ids, vocab_->stop_token_ids()[0]);
      if (ids.empty()) break;
      ASSERT_TRUE(matcher.accept_token(ids[rng() % ids.size()]));
    }
    while (matcher.num_steps() > 0) {
      const int n = std::min(matcher.num_steps(), 1 + static_cast<int>(rng() % 4));
      ASSERT_TRUE(matcher.rollback(n));
      EXPECT_EQ(engine_mask(matcher), masks[matcher.num_steps()])
          << "after rolling back to " << matcher.num_steps();
    }
    EXPECT_FALSE(matcher.rollback(1));
  }
}

TEST_F(MatcherTest, StopTokenTerminatesOnlyWhereTheGrammarEnds) {
  const auto grammar = compiler_->choice({"yes", "no"});
  GrammarMatcher matcher(grammar);
  const int32_t stop = vocab_->stop_token_ids()[0];
  EXPECT_FALSE(matcher.accept_token(stop));
  ASSERT_TRUE(matcher.accept_bytes("ye"));
  EXPECT_FALSE(matcher.can_terminate());
  EXPECT_FALSE(matcher.accept_token(stop));
  ASSERT_TRUE(matcher.accept_bytes("s"));
  EXPECT_TRUE(matcher.can_terminate());
  const auto mask = engine_mask(matcher);
  EXPECT_EQ(allowed_ids(mask, vocab_->size()), std::vector<int32_t>{stop});
  ASSERT_TRUE(matcher.accept_token(stop));
  EXPECT_TRUE(matcher.is_terminated());
  EXPECT_TRUE(allowed_ids(engine_mask(matcher), vocab_->size()).empty());
  EXPECT_FALSE(matcher.accept_bytes("x"));
  ASSERT_TRUE(matcher.rollback(1));
  EXPECT_FALSE(matcher.is_terminated());
}

TEST_F(MatcherTest, RepeatedPositionsShareCacheEntries) {
  const auto grammar = compiler_->json_schema(R"({"type":"string","maxLength":1000})");
  // ~1000 positions, but only those within a token's length of the end differ.
  EXPECT_GT(grammar->pda().num_states(), 1000);
  EXPECT_LT(grammar->num_state_classes(), 400);
}

TEST_F(MatcherTest, CompiledGrammarsAreCachedBySource) {
  const char* schema =
      R"({"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]})";
  const auto a = compiler_->json_schema(schema);
  const auto b = compiler_->json_schema(schema);
  const auto c = compiler_->json_schema(schema, {.any_whitespace = true});
  EXPECT_EQ(a.get(), b.get());
  EXPECT_NE(a.get(), c.get());
  EXPECT_EQ(compiler_->regex("a+").get(), compiler_->regex("a+").get());
  GrammarCompiler small(vocab_, 2);
  const auto first = small.regex("a");
  small.regex("b");
  small.regex("c");
  EXPECT_EQ(small.num_cached(), 2u);
  EXPECT_NE(small.regex("a").get(), first.get());  // evicted, compiled again
}

TEST_F(MatcherTest, ThreadsShareOneCompiledGrammar) {
  const auto grammar = compiler_->json_schema(
      R"({"type":"object","properties":{"items":{"type":"array","items":{"type":"object","properties":{"sku":{"type":"string"},"qty":{"type":"integer","minimum":1}},"required":["sku","qty"]}}},"required":["items"]})");
  // The same token walk in every thread; the lazily built state entries must not race.
  std::vector<int32_t> walk;
  std::vector<std::vector<uint32_t>> expected;
  {
    GrammarMatcher matcher(std::make_shared<CompiledGrammar>(
        Pda::compile(json_schema_grammar(
            std::string_view(
                R"({"type":"object","properties":{"items":{"type":"array","items":{"type":"object","properties":{"sku":{"type":"string"},"qty":{"type":"integer","minimum":1}},"required":["sku","qty"]}}},"required":["items"]})"),
            {})),
        vocab_));
    std::mt19937 rng(3);
    for (int step = 0; step < 30; ++step) {
      expected.push_back(engine_mask(matcher));
      auto ids = allowed_ids(expected.back(), vocab_->size());
      std::erase(ids, vocab_->stop_token_ids()[0]);
      if (ids.empty()) break;
      walk.push_back(ids[rng() % ids.size()]);
      ASSERT_TRUE(matcher.accept_token(walk.back()));
    }
  }
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      GrammarMatcher matcher(grammar);
      for (size_t i = 0; i < walk.size(); ++i) {
        if (engine_mask(matcher) != expected[i]) ++mismatches;
        if (!matcher.accept_token(walk[i])) ++mismatches;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace pagoda::grammar
