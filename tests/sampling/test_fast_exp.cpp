// The vectorizable exp against std::exp, and the deterministic sum against a plain one.
#include "sampling/fast_exp.h"

#include <cmath>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

namespace pagoda {
namespace {

TEST(FastExp, WithinOnePpmOfStdExp) {
  double worst = 0.0;
  for (float x = -87.0f; x <= 88.0f; x += 0.00731f) {
    const double exact = std::exp(static_cast<double>(x));
    const double rel = std::abs(exp_approx(x) - exact) / exact;
    worst = std::max(worst, rel);
  }
  EXPECT_LT(worst, 1e-6);
  EXPECT_EQ(exp_approx(0.0f), 1.0f);
}

TEST(FastExp, UnderflowAndMinusInfinityGiveZero) {
  EXPECT_EQ(exp_approx(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(exp_approx(-88.0f), 0.0f);
  EXPECT_EQ(exp_approx(-1e30f), 0.0f);
  EXPECT_GT(exp_approx(-86.9f), 0.0f);
}

TEST(FastExp, RowVersionMatchesElementwise) {
  std::vector<float> in, out(1001);
  for (int i = 0; i < 1001; ++i) in.push_back(-30.0f + 0.06f * i);
  in[17] = -std::numeric_limits<float>::infinity();
  exp_shifted(in.data(), 2.5f, out.data(), 1001);
  for (int i = 0; i < 1001; ++i) EXPECT_EQ(out[i], exp_approx(in[i] - 2.5f)) << i;
  exp_shifted(in.data(), 2.5f, in.data(), 1001);  // in place
  EXPECT_EQ(in, out);
}

TEST(FastExp, SumMatchesPlainSum) {
  std::vector<float> v;
  double plain = 0.0;
  for (int i = 0; i < 12347; ++i) {
    v.push_back(1.0f / static_cast<float>(1 + i % 97));
    plain += v.back();
  }
  EXPECT_NEAR(sum_floats(v.data(), 12347), plain, 1e-9);
  EXPECT_EQ(sum_floats(v.data(), 3), 1.0 + 0.5 + static_cast<double>(1.0f / 3.0f));
  EXPECT_EQ(sum_floats(v.data(), 0), 0.0);
}

}  // namespace
}  // namespace pagoda
