// The fast row operations (partial selection, heap top-k, incremental top-p) against plain
// full-sort references written from vLLM v1's definitions (vllm/v1/sample/ops/topk_topp_sampler.py
// apply_top_k_top_p, MinPLogitsProcessor).
#include "sampling/logits_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include <gtest/gtest.h>

namespace pagoda {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::vector<float> random_logits(int64_t vocab_size, uint32_t seed, float scale = 3.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> logits(static_cast<size_t>(vocab_size));
  for (float& l : logits) l = normal(gen);
  return logits;
}

// Rounds logits to a coarse grid so that many of them tie, as bf16 logits do.
std::vector<float> tied_logits(int64_t vocab_size, uint32_t seed) {
  std::vector<float> logits = random_logits(vocab_size, seed);
  for (float& l : logits) l = std::round(l * 2.0f) / 2.0f;
  return logits;
}

// Full-sort reference of vLLM v1's truncation: min-p, then top-k (ties kept), then top-p.
std::set<int32_t> reference_keep(const std::vector<float>& logits, const TruncationParams& params) {
  const auto vocab_size = static_cast<int64_t>(logits.size());
  float max = kNegInf;
  for (float l : logits) max = std::max(max, l);
  std::vector<int32_t> kept;
  for (int32_t i = 0; i < vocab_size; ++i) {
    if (!(logits[i] > kNegInf)) continue;
    if (params.min_p > 0.0f && std::exp(static_cast<double>(logits[i]) - max) < params.min_p) {
      continue;
    }
    kept.push_back(i);
  }
  auto higher = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::sort(kept.begin(), kept.end(), higher);
  if (params.top_k > 0 && params.top_k < vocab_size &&
      kept.size() > static_cast<size_t>(params.top_k)) {
    const float kth = logits[kept[params.top_k - 1]];
    while (logits[kept.back()] < kth) kept.pop_back();
  }
  if (params.top_p < 1.0f) {
    double total = 0.0;
    for (int32_t id : kept) total += std::exp(static_cast<double>(logits[id]) - max);
    double before = 0.0;
    size_t num_keep = 0;
    for (int32_t id : kept) {
      if (num_keep > 0 && before >= params.top_p * total) break;
      before += std::exp(static_cast<double>(logits[id]) - max);
      ++num_keep;
    }
    kept.resize(num_keep);
  }
  return {kept.begin(), kept.end()};
}

std::set<int32_t> fast_keep(const std::vector<float>& logits, const TruncationParams& params) {
  SamplingWorkspace workspace;
  const Candidates c =
      truncate_logits(logits.data(), static_cast<int64_t>(logits.size()), params, workspace);
  if (c.all_tokens) {
    std::set<int32_t> all;
    for (int32_t i = 0; i < static_cast<int32_t>(logits.size()); ++i) all.insert(i);
    return all;
  }
  const std::set<int32_t> ids(c.ids.begin(), c.ids.end());
  EXPECT_EQ(ids.size(), c.ids.size()) << "duplicate candidate ids";
  return ids;
}

TEST(LogitsOps, ArgmaxTiesGoToLowestId) {
  std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 2.0f};
  EXPECT_EQ(argmax_token(logits.data(), 5), 1);
  logits[0] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(argmax_token(logits.data(), 5), 1);
  const std::vector<float> random = random_logits(10000, 7);
  const auto it = std::max_element(random.begin(), random.end());
  EXPECT_EQ(argmax_token(random.data(), 10000), it - random.begin());
}

TEST(LogitsOps, LogSumExpMatchesNaive) {
  const std::vector<float> logits = random_logits(5000, 3);
  double naive = 0.0;
  for (float l : logits) naive += std::exp(static_cast<double>(l));
  // Terms are float exps (relative error ~1e-7 each), summed in double.
  EXPECT_NEAR(log_sum_exp(logits.data(), 5000), std::log(naive), 1e-6);
  // Stable where the naive sum overflows.
  const std::vector<float> big = {1000.0f, 1000.0f};
  EXPECT_NEAR(log_sum_exp(big.data(), 2), 1000.0 + std::log(2.0), 1e-9);
}

TEST(LogitsOps, TopNMatchesFullSort) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    const std::vector<float> logits =
        seed == 3 ? tied_logits(20000, seed) : random_logits(20000, seed);
    std::vector<int32_t> ids(logits.size());
    std::iota(ids.begin(), ids.end(), 0);
    std::stable_sort(ids.begin(), ids.end(),
                     [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    for (int n : {1, 5, 20}) {
      std::vector<int32_t> top;
      top_n_tokens(logits.data(), 20000, n, top);
      ASSERT_EQ(top.size(), static_cast<size_t>(n));
      for (int j = 0; j < n; ++j) EXPECT_EQ(top[j], ids[j]) << "seed " << seed << " rank " << j;
    }
  }
}

TEST(LogitsOps, NoTruncationMeansAllTokens) {
  const std::vector<float> logits = random_logits(100, 1);
  SamplingWorkspace workspace;
  for (const TruncationParams& p :
       {TruncationParams{0, 1.0f, 0.0f}, TruncationParams{-1, 1.0f, 0.0f},
        TruncationParams{100, 1.0f, 0.0f}}) {
    EXPECT_TRUE(truncate_logits(logits.data(), 100, p, workspace).all_tokens);
  }
}

TEST(LogitsOps, TruncationMatchesFullSortReference) {
  const std::vector<TruncationParams> cases = {
      {5, 1.0f, 0.0f},    {50, 1.0f, 0.0f},   {1, 1.0f, 0.0f},   {300, 1.0f, 0.0f},
      {4000, 1.0f, 0.0f}, {0, 0.9f, 0.0f},    {0, 0.5f, 0.0f},   {0, 0.999f, 0.0f},
      {0, 1.0f, 0.05f},   {0, 1.0f, 0.5f},    {40, 0.8f, 0.0f},  {1000, 0.95f, 0.1f},
      {0, 0.7f, 0.01f},   {20, 1.0f, 0.001f}, {500, 0.3f, 0.0f}, {0, 0.01f, 0.0f},
  };
  for (uint32_t seed : {11u, 12u}) {
    for (bool ties : {false, true}) {
      std::vector<float> logits = ties ? tied_logits(50000, seed) : random_logits(50000, seed);
      // Some suppressed tokens, as min_tokens leaves them.
      for (int i = 0; i < 50000; i += 997) logits[i] = kNegInf;
      for (const TruncationParams& p : cases) {
        EXPECT_EQ(fast_keep(logits, p), reference_keep(logits, p))
            << "seed " << seed << " ties " << ties << " top_k " << p.top_k << " top_p " << p.top_p
            << " min_p " << p.min_p;
      }
    }
  }
}

TEST(LogitsOps, TruncationAtFullVocabularySize) {
  // DeepSeek-R1-Distill-Qwen's vocabulary; a flat distribution makes top-p walk most of it.
  std::vector<float> logits = random_logits(152064, 5, 0.5f);
  for (const TruncationParams& p :
       {TruncationParams{0, 0.95f, 0.0f}, TruncationParams{50, 0.9f, 0.0f}}) {
    EXPECT_EQ(fast_keep(logits, p), reference_keep(logits, p));
  }
  // A peaked row, where top-p alone skips the tail below its mass floor.
  for (int i = 0; i < 30; ++i) logits[(i * 7919) % 152064] += 9.0f + 0.1f * i;
  for (float top_p : {0.5f, 0.9f, 0.99f, 0.9999f}) {
    const TruncationParams p{0, top_p, 0.0f};
    EXPECT_EQ(fast_keep(logits, p), reference_keep(logits, p)) << "top_p " << top_p;
  }
}

TEST(LogitsOps, TopKKeepsTiesAtTheKthValue) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 2.0f, 2.0f, 0.0f};
  EXPECT_EQ(fast_keep(logits, {2, 1.0f, 0.0f}), (std::set<int32_t>{1, 2, 3, 4}));
}

TEST(LogitsOps, DrawInvertsTheCumulativeDistribution) {
  // probabilities 0.5, 0.25, 0.25 in id order when nothing is cut.
  std::vector<float> logits = {std::log(2.0f), 0.0f, 0.0f};
  SamplingWorkspace workspace;
  const auto draw = [&](double u) {
    std::vector<float> row = logits;
    const Candidates c = truncate_logits(row.data(), 3, {}, workspace);
    return draw_token(row.data(), 3, c, u, workspace);
  };
  EXPECT_EQ(draw(0.0), 0);
  EXPECT_EQ(draw(0.49), 0);
  EXPECT_EQ(draw(0.51), 1);
  EXPECT_EQ(draw(0.74), 1);
  EXPECT_EQ(draw(0.76), 2);
  EXPECT_EQ(draw(0.999999), 2);
}

TEST(LogitsOps, DrawNeverPicksACutOrSuppressedToken) {
  std::vector<float> logits = random_logits(2000, 9);
  logits[std::max_element(logits.begin(), logits.end()) - logits.begin()] = kNegInf;
  SamplingWorkspace workspace;
  const TruncationParams p{30, 0.9f, 0.0f};
  const std::set<int32_t> kept = reference_keep(logits, p);
  for (int i = 0; i < 200; ++i) {
    std::vector<float> row = logits;
    const Candidates c = truncate_logits(row.data(), 2000, p, workspace);
    const int32_t id = draw_token(row.data(), 2000, c, (i + 0.5) / 200.0, workspace);
    EXPECT_TRUE(kept.count(id)) << id;
  }
  std::vector<float> dead(4, kNegInf);
  const Candidates c = truncate_logits(dead.data(), 4, {}, workspace);
  EXPECT_EQ(draw_token(dead.data(), 4, c, 0.5, workspace), -1);
}

}  // namespace
}  // namespace pagoda
