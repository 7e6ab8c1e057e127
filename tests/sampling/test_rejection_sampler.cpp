// Rejection sampling must leave the emitted token distributed exactly as the target p, whatever
// the draft q (Leviathan et al. 2023, Theorem 1). Draw d ~ q, verify it against p, and count
// the emitted tokens over many trials: a chi-square test against p at a fixed seed. With V
// tokens the statistic has V - 1 degrees of freedom; the bound used is the 0.9999 quantile, so
// a correct sampler fails about once in 10^4 seeds and a biased one (say, accepting d with
// probability q(d) instead of p(d)/q(d)) blows far past it at this N.
#include "sampling/rejection_sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace pagoda {
namespace {

std::vector<float> random_distribution(std::mt19937_64& rng, int vocab, double zero_fraction) {
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<double> w(static_cast<size_t>(vocab));
  double total = 0.0;
  for (double& x : w) {
    x = uniform(rng) < zero_fraction ? 0.0 : -std::log(uniform(rng) + 1e-12);  // Dirichlet(1)
    total += x;
  }
  if (total == 0.0) {
    w[0] = 1.0;
    total = 1.0;
  }
  std::vector<float> p(w.size());
  for (size_t i = 0; i < w.size(); ++i) p[i] = static_cast<float>(w[i] / total);
  return p;
}

int32_t draw(std::mt19937_64& rng, const std::vector<float>& q) {
  std::discrete_distribution<int32_t> dist(q.begin(), q.end());
  return dist(rng);
}

// Pearson's chi-square of counts against p over the tokens with p > 0 (a token with p == 0
// drawn even once fails outright).
double chi_square(const std::vector<int64_t>& counts, const std::vector<float>& p, int64_t n,
                  int& degrees) {
  double chi = 0.0;
  degrees = -1;
  for (size_t v = 0; v < p.size(); ++v) {
    if (p[v] <= 0.0f) {
      EXPECT_EQ(counts[v], 0) << "token " << v << " has target probability 0";
      continue;
    }
    const double expected = static_cast<double>(n) * p[v];
    const double diff = static_cast<double>(counts[v]) - expected;
    chi += diff * diff / expected;
    ++degrees;
  }
  return chi;
}

// Upper 0.9999 quantile of chi-square with k degrees of freedom (Wilson-Hilferty, z = 3.719).
double chi_square_bound(int k) {
  const double z = 3.719;
  const double a = 2.0 / (9.0 * k);
  const double t = 1.0 - a + z * std::sqrt(a);
  return k * t * t * t;
}

struct Outcome {
  std::vector<int64_t> counts;
  int64_t num_accepted = 0;
};

Outcome simulate(std::mt19937_64& rng, const std::vector<float>& p, const std::vector<float>& q,
                 bool point_mass, int32_t fixed_draft, int64_t n) {
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  Outcome outcome;
  outcome.counts.assign(p.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t d = point_mass ? fixed_draft : draw(rng, q);
    const DraftVerdict verdict =
        verify_draft_token(p, d, point_mass ? std::span<const float>() : std::span<const float>(q),
                           uniform(rng), uniform(rng));
    ++outcome.counts[static_cast<size_t>(verdict.token_id)];
    outcome.num_accepted += verdict.accepted ? 1 : 0;
  }
  return outcome;
}

TEST(RejectionSampler, PointMassDraftLeavesTheTargetDistribution) {
  std::mt19937_64 rng(2024);
  constexpr int64_t kDraws = 200000;
  for (int trial = 0; trial < 12; ++trial) {
    const int vocab = 2 + trial * 3;
    const std::vector<float> p = random_distribution(rng, vocab, trial % 3 == 0 ? 0.3 : 0.0);
    // Drafts the target likes, drafts it barely likes, and (trial % 4 == 3) one it forbids.
    int32_t d = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
    if (trial % 4 == 3) {
      for (int32_t v = 0; v < vocab; ++v) {
        if (p[static_cast<size_t>(v)] == 0.0f) d = v;
      }
    }
    const Outcome outcome = simulate(rng, p, {}, true, d, kDraws);
    int degrees = 0;
    const double chi = chi_square(outcome.counts, p, kDraws, degrees);
    SCOPED_TRACE(testing::Message() << "trial " << trial << ", vocab " << vocab);
    if (degrees > 0) {
      EXPECT_LT(chi, chi_square_bound(degrees));
    }
    // The acceptance rate is p(d) (binomial; 5 standard deviations).
    const double rate = static_cast<double>(outcome.num_accepted) / kDraws;
    const double pd = p[static_cast<size_t>(d)];
    EXPECT_NEAR(rate, pd, 5.0 * std::sqrt(pd * (1.0 - pd) / kDraws) + 1e-9);
  }
}

TEST(RejectionSampler, RandomDraftDistributionLeavesTheTargetDistribution) {
  std::mt19937_64 rng(77);
  constexpr int64_t kDraws = 200000;
  for (int trial = 0; trial < 12; ++trial) {
    const int vocab = 2 + trial * 3;
    const std::vector<float> p = random_distribution(rng, vocab, trial % 3 == 0 ? 0.3 : 0.0);
    const std::vector<float> q = random_distribution(rng, vocab, trial % 3 == 1 ? 0.3 : 0.0);
    const Outcome outcome = simulate(rng, p, q, false, 0, kDraws);
    int degrees = 0;
    const double chi = chi_square(outcome.counts, p, kDraws, degrees);
    SCOPED_TRACE(testing::Message() << "trial " << trial << ", vocab " << vocab);
    if (degrees > 0) {
      EXPECT_LT(chi, chi_square_bound(degrees));
    }
    // Expected acceptance: sum over v of min(p(v), q(v)).
    double expected_rate = 0.0;
    for (size_t v = 0; v < p.size(); ++v) expected_rate += std::min(p[v], q[v]);
    const double rate = static_cast<double>(outcome.num_accepted) / kDraws;
    EXPECT_NEAR(rate, expected_rate,
                5.0 * std::sqrt(expected_rate * (1.0 - expected_rate) / kDraws) + 1e-9);
  }
}

TEST(RejectionSampler, IdenticalDistributionsAlwaysAccept) {
  std::mt19937_64 rng(5);
  const std::vector<float> p = random_distribution(rng, 10, 0.0);
  const Outcome outcome = simulate(rng, p, p, false, 0, 10000);
  EXPECT_EQ(outcome.num_accepted, 10000);
}

TEST(RejectionSampler, ACertainDraftIsAcceptedAndAnImpossibleOneNever) {
  const std::vector<float> certain = {0.0f, 1.0f, 0.0f};
  EXPECT_TRUE(verify_draft_token(certain, 1, {}, 0.999, 0.5).accepted);
  const DraftVerdict rejected = verify_draft_token(certain, 2, {}, 0.0, 0.5);
  EXPECT_FALSE(rejected.accepted);
  EXPECT_EQ(rejected.token_id, 1);
}

}  // namespace
}  // namespace pagoda
