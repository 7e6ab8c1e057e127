// TokenConstraints (allowed_token_ids, bad_words, logit_bias) against a plain reference written
// from vLLM's and OpenAI's definitions: it keeps the whole output and looks at every token of
// the vocabulary each step, where the processor keeps a short window and touches named ids only.
#include "sampling/token_constraints.h"

#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <vector>

#include <gtest/gtest.h>

namespace pagoda {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// For each token of the vocabulary, in vLLM v1's order: masked unless allowed; masked if some
// bad word ends with it and the output ends with the rest of that word; then + its bias.
std::vector<float> reference(const std::vector<float>& logits, const SamplingParams& params,
                             const std::vector<int32_t>& output) {
  std::vector<float> out = logits;
  for (int32_t id = 0; id < static_cast<int32_t>(out.size()); ++id) {
    if (params.allowed_token_ids && !params.allowed_token_ids->empty()) {
      bool allowed = false;
      for (int32_t a : *params.allowed_token_ids) allowed = allowed || a == id;
      if (!allowed) out[id] = -kInf;
    }
    for (const std::vector<int32_t>& word : params.bad_words_token_ids) {
      if (word.empty() || word.back() != id) continue;
      const size_t prefix = word.size() - 1;
      if (prefix > output.size()) continue;
      bool match = true;
      for (size_t k = 0; k < prefix; ++k) {
        match = match && output[output.size() - prefix + k] == word[k];
      }
      if (match) out[id] = -kInf;
    }
    auto bias = params.logit_bias.find(id);
    if (bias != params.logit_bias.end()) out[id] += bias->second;
  }
  return out;
}

TEST(TokenConstraints, NothingSetIsInactiveAndLeavesTheRowAlone) {
  TokenConstraints constraints{SamplingParams{}};
  EXPECT_FALSE(constraints.active());
  std::vector<float> row = {1.0f, 2.0f, 3.0f};
  constraints.apply(row.data(), 3);
  EXPECT_EQ(row, (std::vector<float>{1.0f, 2.0f, 3.0f}));
}

TEST(TokenConstraints, HandWorkedExample) {
  SamplingParams params;
  params.allowed_token_ids = {{1, 2, 3, 4, 9}};
  params.bad_words_token_ids = {{4}, {2, 3}};
  params.logit_bias = {{1, -5.0f}, {3, 0.5f}, {6, 10.0f}};
  TokenConstraints constraints(params);
  ASSERT_TRUE(constraints.active());
  // Token 9 is allowed but outside this 8-token row: skipped, as ids >= vocab_size are.
  std::vector<float> row = {1, 1, 1, 1, 1, 1, 1, 1};
  constraints.apply(row.data(), 8);
  EXPECT_EQ(row, (std::vector<float>{-kInf, -4.0f, 1.0f, 1.5f, -kInf, -kInf, -kInf, -kInf}));
  // After a 2, the two-token word bans 3.
  constraints.accept(2);
  row.assign(8, 1.0f);
  constraints.apply(row.data(), 8);
  EXPECT_EQ(row[3], -kInf);
  EXPECT_EQ(row[2], 1.0f);
  constraints.accept(3);  // generated anyway (e.g. forced by a caller): the ban lifts
  row.assign(8, 1.0f);
  constraints.apply(row.data(), 8);
  EXPECT_EQ(row[3], 1.5f);
}

TEST(TokenConstraints, MatchesTheReferenceOnRandomRequests) {
  std::mt19937 rng(29);
  const int32_t vocab = 40;
  std::uniform_int_distribution<int32_t> token(0, vocab - 1);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int trial = 0; trial < 200; ++trial) {
    SamplingParams params;
    if (trial % 3 == 0) {
      params.allowed_token_ids.emplace();
      for (int i = 0; i < 1 + trial % 15; ++i) params.allowed_token_ids->push_back(token(rng));
    }
    for (int w = 0; w < trial % 6; ++w) {
      std::vector<int32_t> word;
      // Short words over a small alphabet so that prefixes actually match.
      for (int k = 0; k < 1 + static_cast<int>(rng() % 4); ++k) word.push_back(token(rng) % 6);
      params.bad_words_token_ids.push_back(word);
    }
    for (int b = 0; b < trial % 5; ++b) {
      params.logit_bias[token(rng)] = std::round(normal(rng) * 4.0f) / 4.0f;
    }
    TokenConstraints constraints(params);
    std::vector<int32_t> output;
    // Long enough for the processor's window to wrap several times.
    for (int step = 0; step < 30; ++step) {
      std::vector<float> logits(vocab);
      for (float& l : logits) l = normal(rng);
      std::vector<float> got = logits;
      constraints.apply(got.data(), vocab);
      EXPECT_EQ(got, reference(logits, params, output)) << "trial " << trial << " step " << step;
      // Mostly tokens of the bad words' alphabet, so their prefixes recur.
      const int32_t next = rng() % 4 == 0 ? token(rng) : token(rng) % 6;
      constraints.accept(next);
      output.push_back(next);
    }
  }
}

}  // namespace
}  // namespace pagoda
