// The MoE dispatch's grouped path on every kernel table this CPU runs, for each weight type the
// experts come in: a batch large enough that most experts get 10+ tokens (the int8 lane panels
// and the column-blocked bf16/int4 tiles) and some get a few (the per-token tiles), against
// the scalar table running each token alone. The scalar table is itself checked against plain
// definitions by quant_kernel_test and kernel_table_test; here the question is whether
// gathering, tiling and scattering an expert's tokens gives each token what it gets alone.
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "device/cpu_device.h"
#include "device/execution_context.h"
#include "kernels/kernels.h"
#include "kernels/quantize.h"
#include "model/layers/moe.h"
#include "util/half.h"

namespace pagoda {
namespace {

// A V2-Lite-like layer cut down: softmax top-6 of 16 experts, norm off, and the two shared
// experts fused into one MLP of twice the width. Widths are multiples of 32 (the quantization
// groups) but not of the 16-row panels' multiples of 6 tokens.
constexpr int64_t kHidden = 64, kInter = 96, kTokens = 50;
constexpr int32_t kExperts = 16, kTopK = 6;

struct WeightCase {
  const char* name;
  DType dtype;
  int64_t group_size;
  bool int8_activations;
};

std::ostream& operator<<(std::ostream& os, const WeightCase& c) {
  return os << c.name;
}

const WeightCase kWeightCases[] = {
    {"bf16", DType::kBF16, 0, false},        {"int8_per_channel_w8a8", DType::kI8, 0, true},
    {"int8_g32_w8a8", DType::kI8, 32, true}, {"int8_g32_weight_only", DType::kI8, 32, false},
    {"int4_g32_w4a8", DType::kI4, 32, true}, {"int4_g32_weight_only", DType::kI4, 32, false},
};

// One matrix in the case's type, owning its bytes.
struct Matrix {
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
  QuantizedMatrix quantized;
  WeightView view;
};

Matrix random_matrix(std::mt19937& rng, const WeightCase& c, int64_t rows, int64_t cols) {
  std::normal_distribution<float> n(0.0f, 0.15f);
  Matrix m;
  for (int64_t i = 0; i < rows * cols; ++i) m.f32.push_back(n(rng));
  const WeightView f32{m.f32.data(), DType::kF32, rows, cols};
  if (c.dtype == DType::kBF16) {
    for (float v : m.f32) m.bf16.push_back(f32_to_bf16(v));
    m.view = {m.bf16.data(), DType::kBF16, rows, cols};
  } else {
    m.quantized = quantize_matrix(f32, c.dtype, c.group_size);
    m.view = m.quantized.view;
    m.view.int8_activations = c.int8_activations;
  }
  return m;
}

struct Layer {
  MoeRouterConfig router;
  std::vector<float> router_weights;
  std::vector<Matrix> matrices;  // gate, up, down of each expert, then of the shared MLP
  MoeWeights w;
  std::vector<float> x;

  explicit Layer(const WeightCase& c) {
    router.num_experts = kExperts;
    router.top_k = kTopK;
    router.scoring = MoeScoring::kSoftmax;
    router.method = MoeTopkMethod::kGreedy;
    router.norm_topk_prob = false;
    router.scale_after_norm = false;
    std::mt19937 rng(26);
    std::normal_distribution<float> n(0.0f, 1.0f);
    for (int64_t i = 0; i < kExperts * kHidden; ++i) router_weights.push_back(n(rng));
    for (int64_t i = 0; i < kTokens * kHidden; ++i) x.push_back(n(rng));
    matrices.reserve(3 * (kExperts + 1));
    const auto mlp = [&](int64_t inter) {
      matrices.push_back(random_matrix(rng, c, inter, kHidden));
      matrices.push_back(random_matrix(rng, c, inter, kHidden));
      matrices.push_back(random_matrix(rng, c, kHidden, inter));
      const size_t last = matrices.size();
      return ExpertMlp{matrices[last - 3].view, matrices[last - 2].view, matrices[last - 1].view};
    };
    w.router = {router_weights.data(), DType::kF32, kExperts, kHidden};
    for (int32_t e = 0; e < kExperts; ++e) w.experts.push_back(mlp(kInter));
    w.has_shared = true;
    w.shared = mlp(2 * kInter);
  }
};

class MoeDispatchIsaTest : public ::testing::TestWithParam<std::tuple<std::string, WeightCase>> {};

TEST_P(MoeDispatchIsaTest, GroupedTokensMatchEachTokenAloneOnScalar) {
  const auto& [isa, weights] = GetParam();
  const KernelTable* table = kernels_for(isa);
  if (table == nullptr) GTEST_SKIP() << "this CPU does not run " << isa;
  const Layer layer(weights);
  ExecutionContext ctx(cpu_device(), *table);
  ExecutionContext scalar(cpu_device(), *kernels_for("scalar"));

  MoeDispatcher moe;
  std::vector<float> out(static_cast<size_t>(kTokens * kHidden));
  moe.forward(ctx, layer.router, layer.w, layer.x.data(), kTokens, out.data());
  const std::vector<int32_t> ids = moe.last_expert_ids();

  // Most experts take the tile paths (10+ tokens), a few take the per-token ones.
  std::vector<int> per_expert(kExperts, 0);
  for (int32_t e : ids) ++per_expert[static_cast<size_t>(e)];
  EXPECT_GE(std::count_if(per_expert.begin(), per_expert.end(), [](int n) { return n >= 10; }),
            kExperts / 2);

  MoeDispatcher alone;
  std::vector<float> want(static_cast<size_t>(kHidden));
  // W8A8 / W4A8 requantize silu(gate) * up per token before the down projection: a last-bit
  // difference in it can move one int8 step, which bounds how close two tables can be.
  // Tables that multiply bf16 weights with vdpbf16ps (KernelTable::matmul_bf16_activations)
  // round the activations to bf16 too: 8 significant bits.
  double tolerance = weights.int8_activations ? 2e-3 : 1e-4;
  if (weights.dtype == DType::kBF16 && table->matmul_bf16_activations) tolerance = 5e-2;
  for (int64_t t = 0; t < kTokens; ++t) {
    const float* xt = layer.x.data() + t * kHidden;
    alone.forward(scalar, layer.router, layer.w, xt, 1, want.data());
    std::vector<int32_t> want_ids = alone.last_expert_ids();
    EXPECT_TRUE(std::equal(want_ids.begin(), want_ids.end(), ids.begin() + t * kTopK))
        << "token " << t << " routed differently";
    double worst = 0;
    for (int64_t i = 0; i < kHidden; ++i) {
      const double got = out[static_cast<size_t>(t * kHidden + i)];
      const double ref = want[static_cast<size_t>(i)];
      worst = std::max(worst, std::abs(got - ref) / (1.0 + std::abs(ref)));
    }
    EXPECT_LE(worst, tolerance) << "token " << t;
  }
}

// Each token's result does not depend on which other tokens share its experts' groups: the
// same table on the batch and on each token alone.
TEST_P(MoeDispatchIsaTest, GroupedTokensMatchEachTokenAloneOnTheSameTable) {
  const auto& [isa, weights] = GetParam();
  const KernelTable* table = kernels_for(isa);
  if (table == nullptr) GTEST_SKIP() << "this CPU does not run " << isa;
  const Layer layer(weights);
  ExecutionContext ctx(cpu_device(), *table);
  MoeDispatcher moe, alone;
  std::vector<float> out(static_cast<size_t>(kTokens * kHidden));
  moe.forward(ctx, layer.router, layer.w, layer.x.data(), kTokens, out.data());
  std::vector<float> want(static_cast<size_t>(kHidden));
  for (int64_t t = 0; t < kTokens; ++t) {
    alone.forward(ctx, layer.router, layer.w, layer.x.data() + t * kHidden, 1, want.data());
    for (int64_t i = 0; i < kHidden; ++i) {
      EXPECT_NEAR(out[static_cast<size_t>(t * kHidden + i)], want[static_cast<size_t>(i)],
                  1e-5 * (1.0 + std::abs(want[static_cast<size_t>(i)])))
          << "token " << t << " column " << i;
    }
  }
}

// The gather and the scatter are split across threads (rows, then column slices): the bits
// must not depend on how many threads ran them (3: shares that do not divide evenly).
TEST_P(MoeDispatchIsaTest, GroupedTokensGiveTheSameBitsOnOneAndThreeThreads) {
  const auto& [isa, weights] = GetParam();
  const KernelTable* table = kernels_for(isa);
  if (table == nullptr) GTEST_SKIP() << "this CPU does not run " << isa;
  const Layer layer(weights);
  ExecutionContext ctx(cpu_device(), *table);
  const int saved_threads = omp_get_max_threads();
  std::vector<float> one(static_cast<size_t>(kTokens * kHidden));
  std::vector<float> three(one.size());
  MoeDispatcher moe;
  omp_set_num_threads(1);
  moe.forward(ctx, layer.router, layer.w, layer.x.data(), kTokens, one.data());
  omp_set_num_threads(3);
  moe.forward(ctx, layer.router, layer.w, layer.x.data(), kTokens, three.data());
  omp_set_num_threads(saved_threads);
  for (size_t i = 0; i < one.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(one[i]), std::bit_cast<uint32_t>(three[i]))
        << "token " << i / kHidden << " column " << i % kHidden;
  }
}

INSTANTIATE_TEST_SUITE_P(AllIsas, MoeDispatchIsaTest,
                         ::testing::Combine(::testing::ValuesIn(kernel_isa_names()),
                                            ::testing::ValuesIn(kWeightCases)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" +
                                  std::string(std::get<1>(info.param).name);
                         });

}  // namespace
}  // namespace pagoda
