// The MoE router's rules on hand-made scores (each case separates two rules that are easy to
// confuse), and the grouped expert dispatch against a plain per-token scalar computation.
#include <cmath>
#include <random>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/host_context.h"
#include "model/layers/moe.h"

namespace pagoda {
namespace {

float logit_of(float p) {
  return std::log(p / (1.0f - p));
}

struct Routed {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

Routed route(const MoeRouterConfig& c, const std::vector<float>& logits,
             const std::vector<float>& bias = {}) {
  std::vector<float> scratch(static_cast<size_t>(2 * c.num_experts + c.num_groups));
  Routed r{std::vector<int32_t>(static_cast<size_t>(c.top_k)),
           std::vector<float>(static_cast<size_t>(c.top_k))};
  route_token(c, logits.data(), bias.empty() ? nullptr : bias.data(), scratch.data(), r.ids.data(),
              r.weights.data());
  return r;
}

MoeRouterConfig sigmoid_groups(MoeTopkMethod method) {
  MoeRouterConfig c;
  c.num_experts = 8;
  c.top_k = 2;
  c.num_groups = 4;
  c.topk_groups = 1;
  c.scoring = MoeScoring::kSigmoid;
  c.method = method;
  return c;
}

// Groups of two: g0 = {0.9, 0.1} (best single expert), g1 = {0.6, 0.6} (best pair).
const std::vector<float> kGroupScores = {0.9f, 0.1f, 0.6f, 0.6f, 0.5f, 0.5f, 0.2f, 0.2f};

std::vector<float> logits_for(const std::vector<float>& scores) {
  std::vector<float> l;
  for (float s : scores) l.push_back(logit_of(s));
  return l;
}

TEST(MoeRouter, SoftmaxGreedyTopK) {
  MoeRouterConfig c;
  c.num_experts = 4;
  c.top_k = 2;
  const Routed r = route(c, {0.0f, 3.0f, 1.0f, 2.0f});
  const float z = 1.0f + std::exp(1.0f) + std::exp(2.0f) + std::exp(3.0f);
  ASSERT_EQ(r.ids, (std::vector<int32_t>{1, 3}));  // ascending ids
  EXPECT_NEAR(r.weights[0], std::exp(3.0f) / z, 1e-6);
  EXPECT_NEAR(r.weights[1], std::exp(2.0f) / z, 1e-6);
}

TEST(MoeRouter, V2GroupLimitedRanksGroupsByTheirBestExpert) {
  const Routed r =
      route(sigmoid_groups(MoeTopkMethod::kGroupLimitedGreedy), logits_for(kGroupScores));
  EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 1}));  // group 0 wins on its 0.9
  EXPECT_NEAR(r.weights[0], 0.9f, 1e-6);
  EXPECT_NEAR(r.weights[1], 0.1f, 1e-6);
}

TEST(MoeRouter, V3NoauxTcRanksGroupsByTheirTopTwoSum) {
  const std::vector<float> zero_bias(8, 0.0f);
  const Routed r =
      route(sigmoid_groups(MoeTopkMethod::kNoauxTc), logits_for(kGroupScores), zero_bias);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{2, 3}));  // group 1 wins on 0.6 + 0.6
}

TEST(MoeRouter, BiasChoosesButNeverWeights) {
  MoeRouterConfig c;
  c.num_experts = 4;
  c.top_k = 1;
  c.num_groups = 1;
  c.scoring = MoeScoring::kSigmoid;
  c.method = MoeTopkMethod::kNoauxTc;
  const std::vector<float> scores = {0.5f, 0.6f, 0.7f, 0.4f};
  const Routed r = route(c, logits_for(scores), {0.5f, 0.0f, 0.0f, 0.0f});
  EXPECT_EQ(r.ids[0], 0);                 // 0.5 + 0.5 beats 0.7
  EXPECT_NEAR(r.weights[0], 0.5f, 1e-6);  // the raw score, not 1.0

  // Without noaux_tc the bias is not consulted at all.
  c.method = MoeTopkMethod::kGreedy;
  EXPECT_EQ(route(c, logits_for(scores), {0.5f, 0.0f, 0.0f, 0.0f}).ids[0], 2);
}

TEST(MoeRouter, NormalisationAndScalingRules) {
  MoeRouterConfig c;
  c.num_experts = 4;
  c.top_k = 2;
  c.scoring = MoeScoring::kSigmoid;
  const std::vector<float> logits = logits_for({0.2f, 0.8f, 0.4f, 0.1f});
  c.norm_topk_prob = true;
  c.routed_scaling_factor = 2.5f;
  c.scale_after_norm = true;  // V3: normalise, then scale
  Routed r = route(c, logits);
  EXPECT_NEAR(r.weights[0] + r.weights[1], 2.5f, 1e-5);
  EXPECT_NEAR(r.weights[0] / r.weights[1], 2.0f, 1e-5);  // experts 1, 2: 0.8 : 0.4

  c.scale_after_norm = false;  // V2: normalised weights are not scaled
  r = route(c, logits);
  EXPECT_NEAR(r.weights[0] + r.weights[1], 1.0f, 1e-6);

  c.norm_topk_prob = false;  // V2 without normalisation: scaled raw scores
  c.routed_scaling_factor = 16.0f;
  r = route(c, logits);
  EXPECT_NEAR(r.weights[0], 16.0f * 0.8f, 1e-4);
  EXPECT_NEAR(r.weights[1], 16.0f * 0.4f, 1e-4);
}

// --- dispatch ---------------------------------------------------------------------------------

struct Mlp {
  std::vector<float> gate, up, down;  // [inter, hidden], [inter, hidden], [hidden, inter]
  ExpertMlp view(int64_t hidden, int64_t inter) const {
    return {{gate.data(), DType::kF32, inter, hidden},
            {up.data(), DType::kF32, inter, hidden},
            {down.data(), DType::kF32, hidden, inter}};
  }
};

Mlp random_mlp(std::mt19937& rng, int64_t hidden, int64_t inter) {
  std::normal_distribution<float> n(0.0f, 0.5f);
  Mlp m;
  for (int64_t i = 0; i < inter * hidden; ++i) m.gate.push_back(n(rng));
  for (int64_t i = 0; i < inter * hidden; ++i) m.up.push_back(n(rng));
  for (int64_t i = 0; i < hidden * inter; ++i) m.down.push_back(n(rng));
  return m;
}

// Plain scalar SwiGLU MLP of one row, in double.
std::vector<double> mlp_ref(const Mlp& m, const float* x, int64_t hidden, int64_t inter) {
  std::vector<double> h(static_cast<size_t>(inter)), y(static_cast<size_t>(hidden), 0.0);
  for (int64_t i = 0; i < inter; ++i) {
    double g = 0, u = 0;
    for (int64_t c = 0; c < hidden; ++c) {
      g += double{m.gate[static_cast<size_t>(i * hidden + c)]} * x[c];
      u += double{m.up[static_cast<size_t>(i * hidden + c)]} * x[c];
    }
    h[static_cast<size_t>(i)] = g / (1.0 + std::exp(-g)) * u;
  }
  for (int64_t r = 0; r < hidden; ++r) {
    for (int64_t i = 0; i < inter; ++i)
      y[static_cast<size_t>(r)] +=
          m.down[static_cast<size_t>(r * inter + i)] * h[static_cast<size_t>(i)];
  }
  return y;
}

// A small V3-style MoE layer (groups, bias, a shared expert) and a batch of inputs.
struct MoeCase {
  static constexpr int64_t kHidden = 16, kInter = 8, kTokens = 9;
  MoeRouterConfig c;
  std::vector<Mlp> experts;
  Mlp shared;
  std::vector<float> router, x, score_bias;
  MoeWeights w;

  MoeCase() {
    c.num_experts = 6;
    c.top_k = 2;
    c.num_groups = 3;
    c.topk_groups = 2;
    c.scoring = MoeScoring::kSigmoid;
    c.method = MoeTopkMethod::kNoauxTc;
    c.norm_topk_prob = true;
    c.routed_scaling_factor = 2.5f;
    std::mt19937 rng(7);
    std::normal_distribution<float> n(0.0f, 1.0f);
    for (int e = 0; e < c.num_experts; ++e) experts.push_back(random_mlp(rng, kHidden, kInter));
    shared = random_mlp(rng, kHidden, 2 * kInter);
    router.resize(static_cast<size_t>(c.num_experts * kHidden));
    for (float& v : router) v = n(rng);
    w.router = {router.data(), DType::kF32, c.num_experts, kHidden};
    score_bias = {0.1f, 0.0f, 0.3f, 0.0f, 0.2f, 0.05f};
    w.score_bias = score_bias;
    for (const Mlp& m : experts) w.experts.push_back(m.view(kHidden, kInter));
    w.has_shared = true;
    w.shared = shared.view(kHidden, 2 * kInter);
    x.resize(static_cast<size_t>(kTokens * kHidden));
    for (float& v : x) v = n(rng);
  }
};

TEST(MoeDispatcher, MatchesPerTokenScalarReferenceAndIsBatchInvariant) {
  const MoeCase m;
  const int64_t kHidden = MoeCase::kHidden, kInter = MoeCase::kInter, kTokens = MoeCase::kTokens;
  const MoeRouterConfig& c = m.c;
  const MoeWeights& w = m.w;
  const std::vector<float>& x = m.x;
  const std::vector<Mlp>& experts = m.experts;
  const Mlp& shared = m.shared;
  MoeDispatcher moe;
  std::vector<float> out(x.size());
  moe.forward(host_execution_context(), c, w, x.data(), kTokens, out.data());
  const std::vector<int32_t> ids = moe.last_expert_ids();
  const std::vector<float> weights = moe.last_weights();

  std::vector<int> uses(static_cast<size_t>(c.num_experts), 0);
  for (int64_t t = 0; t < kTokens; ++t) {
    const float* xt = &x[static_cast<size_t>(t * kHidden)];
    std::vector<double> want = mlp_ref(shared, xt, kHidden, 2 * kInter);
    for (int k = 0; k < c.top_k; ++k) {
      const int32_t e = ids[static_cast<size_t>(t * c.top_k + k)];
      ++uses[static_cast<size_t>(e)];
      const std::vector<double> y = mlp_ref(experts[static_cast<size_t>(e)], xt, kHidden, kInter);
      for (int64_t i = 0; i < kHidden; ++i)
        want[static_cast<size_t>(i)] +=
            weights[static_cast<size_t>(t * c.top_k + k)] * y[static_cast<size_t>(i)];
    }
    for (int64_t i = 0; i < kHidden; ++i) {
      EXPECT_NEAR(out[static_cast<size_t>(t * kHidden + i)], want[static_cast<size_t>(i)], 1e-4)
          << "token " << t;
    }
    // The same token alone gives the same result.
    std::vector<float> alone(static_cast<size_t>(kHidden));
    moe.forward(host_execution_context(), c, w, xt, 1, alone.data());
    for (int64_t i = 0; i < kHidden; ++i) {
      EXPECT_NEAR(alone[static_cast<size_t>(i)], out[static_cast<size_t>(t * kHidden + i)], 1e-5);
    }
  }
  int num_used = 0;
  for (int u : uses) num_used += u > 0 ? 1 : 0;
  EXPECT_GE(num_used, 3) << "the batch should exercise several experts";
}

// last_num_routed_experts() is the number of distinct experts among the routed tokens' choices
// (those of this rank's experts only, under expert parallelism): a token alone runs top_k.
TEST(MoeDispatcher, CountsTheUnionOfTheExpertsItsTokensWereRoutedTo) {
  const MoeCase m;
  std::vector<float> out(m.x.size());
  for (int32_t first_expert : {0, 2}) {
    MoeWeights w = m.w;  // first_expert 2: the rank holding experts 2..5 only
    w.experts.erase(w.experts.begin(), w.experts.begin() + first_expert);
    w.first_expert = first_expert;
    for (int64_t n = 1; n <= MoeCase::kTokens; ++n) {
      MoeDispatcher moe;
      moe.forward(host_execution_context(), m.c, w, m.x.data(), n, out.data());
      const std::vector<int32_t>& ids = moe.last_expert_ids();
      std::set<int32_t> used;
      for (int64_t i = 0; i < n * m.c.top_k; ++i) {
        if (ids[static_cast<size_t>(i)] >= first_expert) used.insert(ids[static_cast<size_t>(i)]);
      }
      EXPECT_EQ(moe.last_num_routed_experts(), static_cast<int32_t>(used.size()))
          << n << " tokens, experts from " << first_expert;
      if (n == 1 && first_expert == 0) {
        EXPECT_EQ(moe.last_num_routed_experts(), m.c.top_k);
      }
    }
  }
}

// A dispatcher reserved for narrower experts (and more tokens) than a later layer has must
// grow its buffers for that layer, not keep the first sizes (ASan sees the overflow if not).
TEST(MoeDispatcher, ReserveGrowsForWiderExperts) {
  const MoeCase m;
  std::vector<float> want(m.x.size()), got(m.x.size());
  MoeDispatcher fresh;
  fresh.forward(host_execution_context(), m.c, m.w, m.x.data(), MoeCase::kTokens, want.data());
  MoeDispatcher reserved;
  reserved.reserve(host_execution_context(), m.c, MoeCase::kHidden, /*inter=*/2, /*shared_inter=*/0,
                   4 * MoeCase::kTokens);
  reserved.forward(host_execution_context(), m.c, m.w, m.x.data(), MoeCase::kTokens, got.data());
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace pagoda
