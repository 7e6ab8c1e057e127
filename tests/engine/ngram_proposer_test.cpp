// The n-gram proposer and --speculative-config parsing on hand-worked cases: the longest suffix
// within [prompt_lookup_min, prompt_lookup_max] wins, the most recent occurrence among equals,
// the draft runs on into the suffix itself, and vLLM's defaults for the lookup bounds.
#include "engine/ngram_proposer.h"

#include <gtest/gtest.h>

#include <vector>

#include "engine/speculative_config.h"
#include "util/error.h"

namespace pagoda {
namespace {

SpeculativeConfig ngram(int32_t k, int32_t min_n, int32_t max_n) {
  SpeculativeConfig c;
  c.method = "ngram";
  c.num_speculative_tokens = k;
  c.prompt_lookup_min = min_n;
  c.prompt_lookup_max = max_n;
  return c;
}

std::vector<int32_t> propose(const SpeculativeConfig& c, const std::vector<int32_t>& tokens,
                             int32_t max_tokens = 100) {
  std::vector<int32_t> out = {99};  // cleared by propose
  NgramProposer(c).propose(tokens, max_tokens, out);
  return out;
}

TEST(NgramProposer, LongestSuffixWinsOverAMoreRecentShorterOne) {
  // Suffix [1, 2, 3]: occurs at 0..2 (followed by 4, 5); [2, 3] alone also at 6..7
  // (followed by 8), more recent but shorter.
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 0, 2, 3, 8, 1, 2, 3};
  EXPECT_EQ(propose(ngram(2, 1, 3), tokens), (std::vector<int32_t>{4, 5}));
  // With max 2 both match equally long: the most recent, at 6..7, wins.
  EXPECT_EQ(propose(ngram(2, 1, 2), tokens), (std::vector<int32_t>{8, 1}));
}

TEST(NgramProposer, NoMatchOfTheMinimumLengthDraftsNothing) {
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 9, 3, 5};
  EXPECT_TRUE(propose(ngram(3, 2, 4), tokens).empty());  // [3, 5] never occurred
  EXPECT_EQ(propose(ngram(3, 1, 4), {1, 2, 3, 4, 9, 3}), (std::vector<int32_t>{4, 9, 3}));
  EXPECT_TRUE(propose(ngram(3, 1, 4), {7}).empty());
}

TEST(NgramProposer, ADraftRunsIntoTheSuffixAndStopsAtTheEnd) {
  // A loop: [5, 6] repeating; the suffix [5, 6] last occurred at 2..3, followed by 5, 6.
  EXPECT_EQ(propose(ngram(4, 1, 2), {5, 6, 5, 6}), (std::vector<int32_t>{5, 6}));
  // The most recent full-length match ends at 3: only the two tokens after it exist.
  EXPECT_EQ(propose(ngram(4, 1, 4), {5, 6, 5, 6, 5, 6}), (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(propose(ngram(4, 1, 4), {5, 6, 5, 6, 5, 6}, 1), (std::vector<int32_t>{5}));
}

TEST(SpeculativeConfig, ParsesVllmsJsonWithItsDefaults) {
  EXPECT_FALSE(parse_speculative_config("").enabled());
  const SpeculativeConfig full = parse_speculative_config(
      R"({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4,
          "prompt_lookup_min": 1})");
  EXPECT_TRUE(full.enabled());
  EXPECT_EQ(full.num_speculative_tokens, 4);
  EXPECT_EQ(full.prompt_lookup_max, 4);
  EXPECT_EQ(full.prompt_lookup_min, 1);
  const auto neither =
      parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 2})");
  EXPECT_EQ(neither.prompt_lookup_min, 5);
  EXPECT_EQ(neither.prompt_lookup_max, 5);
  const auto only_max = parse_speculative_config(
      R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3})");
  EXPECT_EQ(only_max.prompt_lookup_min, 3);
  EXPECT_THROW(parse_speculative_config(
                   R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 4,
                       "prompt_lookup_max": 2})"),
               Error);
  EXPECT_THROW(parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 0})"),
               Error);
  EXPECT_THROW(parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": "4"})"),
               Error);
  EXPECT_THROW(parse_speculative_config("[1]"), Error);
  EXPECT_THROW(parse_speculative_config("{"), Error);
}

}  // namespace
}  // namespace pagoda
