// The model layers against plain references written here from their definitions (double
// accumulation), on the host execution context: each layer must compute what its header says,
// whatever ops and kernels it dispatches to. (The whole models are checked against PyTorch by
// model.logits_match_pytorch and deepseek.logits_match_pytorch.)
#include <cmath>
#include <random>
#include <span>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/attention.h"
#include "kernels/host_context.h"
#include "model/forward_batch.h"
#include "model/layers/activation.h"
#include "model/layers/attention_batch.h"
#include "model/layers/gated_mlp.h"
#include "model/layers/linear.h"
#include "model/layers/paged_attention.h"
#include "model/layers/residual.h"
#include "model/layers/rms_norm.h"
#include "model/layers/rotary_embedding.h"

namespace pagoda {
namespace {

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = u(rng);
  return v;
}

WeightView f32_view(const std::vector<float>& w, int64_t rows, int64_t cols) {
  return WeightView{w.data(), DType::kF32, rows, cols};
}

// y[t, r] = sum_c x[t, c] * w[r, c] + b[r], in double.
std::vector<double> linear_reference(const std::vector<float>& x, int64_t tokens,
                                     const std::vector<float>& w, std::span<const float> b,
                                     int64_t rows, int64_t cols) {
  std::vector<double> y(static_cast<size_t>(tokens * rows));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      double sum = b.empty() ? 0.0 : b[static_cast<size_t>(r)];
      for (int64_t c = 0; c < cols; ++c)
        sum += double{x[static_cast<size_t>(t * cols + c)]} * w[static_cast<size_t>(r * cols + c)];
      y[static_cast<size_t>(t * rows + r)] = sum;
    }
  }
  return y;
}

// fp32 accumulation over `cols` products of values in [-1, 1]: well inside 1e-5 relative to
// the sum of magnitudes for these sizes.
constexpr double kMatmulTolerance = 1e-4;

TEST(Linear, MatchesReferenceWithBiasAndRowStride) {
  const ExecutionContext ctx = host_execution_context();
  constexpr int64_t kTokens = 5, kRows = 40, kCols = 64, kLdy = 48;
  const std::vector<float> w = random_values(kRows * kCols, 1), b = random_values(kRows, 2);
  const std::vector<float> x = random_values(kTokens * kCols, 3);
  const Linear linear{f32_view(w, kRows, kCols), b};
  std::vector<float> y(kTokens * kLdy, 7.0f);
  linear.forward(ctx, x.data(), kTokens, y.data(), kLdy);
  const std::vector<double> want = linear_reference(x, kTokens, w, b, kRows, kCols);
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int64_t r = 0; r < kRows; ++r)
      EXPECT_NEAR(y[t * kLdy + r], want[t * kRows + r], kMatmulTolerance) << t << "," << r;
    for (int64_t r = kRows; r < kLdy; ++r) EXPECT_EQ(y[t * kLdy + r], 7.0f);  // untouched
  }
}

TEST(Linear, BatchGivesWhatEachProjectionGivesAlone) {
  const ExecutionContext ctx = host_execution_context();
  constexpr int64_t kTokens = 3, kCols = 32;
  const std::vector<float> x = random_values(kTokens * kCols, 4);
  const std::vector<float> wq = random_values(48 * kCols, 5), wk = random_values(16 * kCols, 6);
  const std::vector<float> bq = random_values(48, 7);  // the layer's bias is a view of it
  const Linear q{f32_view(wq, 48, kCols), bq};
  const Linear k{f32_view(wk, 16, kCols), {}};
  std::vector<float> q_alone(kTokens * 48), k_alone(kTokens * 16);
  q.forward(ctx, x.data(), kTokens, q_alone.data());
  k.forward(ctx, x.data(), kTokens, k_alone.data());
  std::vector<float> q_batch(kTokens * 48), k_batch(kTokens * 16);
  const LinearCall calls[] = {{&q, x.data(), kTokens, q_batch.data(), 48},
                              {&k, x.data(), kTokens, k_batch.data(), 16}};
  linear_batch(ctx, calls);
  EXPECT_EQ(q_batch, q_alone);
  EXPECT_EQ(k_batch, k_alone);
}

TEST(RmsNorm, RowsFusedAddAndSingleRowAgreeWithTheDefinition) {
  const ExecutionContext ctx = host_execution_context();
  constexpr int64_t kRows = 3, kN = 24;
  const std::vector<float> weight = random_values(kN, 8);  // the layer's weight is a view of it
  const RmsNorm norm{weight, 1e-5f};
  const std::vector<float> x = random_values(kRows * kN, 9);
  std::vector<float> out(kRows * kN);
  norm.forward(ctx, x.data(), kRows, out.data());
  for (int64_t i = 0; i < kRows; ++i) {
    double sum_squares = 0;
    for (int64_t j = 0; j < kN; ++j) sum_squares += double{x[i * kN + j]} * x[i * kN + j];
    const double inv_rms = 1.0 / std::sqrt(sum_squares / kN + 1e-5);
    for (int64_t j = 0; j < kN; ++j)
      EXPECT_NEAR(out[i * kN + j], x[i * kN + j] * inv_rms * norm.weight[j], 1e-5);
    std::vector<float> row(kN);
    norm.forward_row(ctx, &x[i * kN], row.data());
    for (int64_t j = 0; j < kN; ++j) EXPECT_EQ(row[j], out[i * kN + j]);
  }
  // residual += delta, then the norm of the sum.
  std::vector<float> residual = random_values(kRows * kN, 10);
  const std::vector<float> delta = random_values(kRows * kN, 11);
  std::vector<float> sum(kRows * kN);
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = residual[i] + delta[i];
  std::vector<float> fused(kRows * kN), separate(kRows * kN);
  norm.add_forward(ctx, residual.data(), delta.data(), kRows, fused.data());
  EXPECT_EQ(residual, sum);
  norm.forward(ctx, sum.data(), kRows, separate.data());
  for (size_t i = 0; i < fused.size(); ++i) EXPECT_NEAR(fused[i], separate[i], 1e-6);
}

TEST(GatedMlp, IsDownOfSiluGateTimesUp) {
  const ExecutionContext ctx = host_execution_context();
  constexpr int64_t kTokens = 2, kHidden = 32, kInter = 64;
  const std::vector<float> wg = random_values(kInter * kHidden, 12);
  const std::vector<float> wu = random_values(kInter * kHidden, 13);
  const std::vector<float> wd = random_values(kHidden * kInter, 14);
  const std::vector<float> bd = random_values(kHidden, 15);  // the down bias is a view of it
  const GatedMlp mlp{Linear{f32_view(wg, kInter, kHidden), {}},
                     Linear{f32_view(wu, kInter, kHidden), {}},
                     Linear{f32_view(wd, kHidden, kInter), bd}};
  const std::vector<float> x = random_values(kTokens * kHidden, 16);
  std::vector<float> gate(kTokens * kInter), up(kTokens * kInter), out(kTokens * kHidden);
  mlp.forward(ctx, x.data(), kTokens, gate.data(), up.data(), out.data());

  const std::vector<double> g = linear_reference(x, kTokens, wg, {}, kInter, kHidden);
  const std::vector<double> u = linear_reference(x, kTokens, wu, {}, kInter, kHidden);
  std::vector<float> h(kTokens * kInter);
  for (size_t i = 0; i < h.size(); ++i)
    h[i] = static_cast<float>(g[i] / (1 + std::exp(-g[i])) * u[i]);
  const std::vector<double> want = linear_reference(h, kTokens, wd, mlp.down.bias, kHidden, kInter);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], want[i], 1e-3) << i;
}

TEST(PagedAttention, MatchesTheContiguousReferenceThroughTheBlockTable) {
  const ExecutionContext ctx = host_execution_context();
  constexpr int32_t kHeads = 4, kKvHeads = 2, kDim = 8, kBlock = 4, kBlocks = 6;
  constexpr int32_t kTokens = 6;  // one sequence prefilled in one step, no cache before it
  std::vector<float> cache_memory(size_t{kBlocks} * kBlock * kKvHeads * kDim * 2);
  PagedKvLayer cache{cache_memory.data(),
                     cache_memory.data() + cache_memory.size() / 2,
                     kBlock,
                     kKvHeads,
                     kDim,
                     kDim,
                     DType::kF32};
  const std::vector<int32_t> block_table = {4, 1};  // out of order on purpose
  ForwardBatch batch;
  for (int32_t i = 0; i < kTokens; ++i) {
    batch.token_ids.push_back(i);
    batch.positions.push_back(i);
    batch.slot_mapping.push_back(int64_t{block_table[i / kBlock]} * kBlock + i % kBlock);
  }
  batch.sequences.push_back({0, kTokens, kTokens, block_table.data(), true, false});
  AttentionBatch attention_batch;
  attention_batch.assign(batch);
  ASSERT_EQ(attention_batch.num_sequences(), 1);

  RopeParams rope_params;
  rope_params.rotary_dim = kDim;
  const RotaryEmbedding rope(rope_params);
  RotaryRows rows;
  const RopeRows rope_rows = rows.compute(ctx, rope, batch.positions.data(), kTokens, true);

  std::vector<float> q = random_values(kTokens * kHeads * kDim, 17);
  const std::vector<float> k = random_values(kTokens * kKvHeads * kDim, 18);
  const std::vector<float> v = random_values(kTokens * kKvHeads * kDim, 19);
  // The reference sees q and k rotated as the kernel table rotates them.
  std::vector<float> q_rot = q, k_rot = k;
  for (int32_t t = 0; t < kTokens; ++t) {
    for (int32_t h = 0; h < kHeads; ++h) {
      float* p = &q_rot[(t * kHeads + h) * kDim];
      ctx.kernels().rope(p, rows.cos(t), rows.sin(t), kDim, true, p);
    }
    for (int32_t h = 0; h < kKvHeads; ++h) {
      float* p = &k_rot[(t * kKvHeads + h) * kDim];
      ctx.kernels().rope(p, rows.cos(t), rows.sin(t), kDim, true, p);
    }
  }
  const float scale = 1.0f / std::sqrt(float{kDim});
  std::vector<float> want(kTokens * kHeads * kDim);
  paged_attention_reference(q_rot.data(), kTokens, kHeads, k_rot.data(), v.data(), kTokens,
                            kKvHeads, kDim, kDim, scale, want.data());

  const PagedAttention attention{kHeads, scale};
  std::vector<float> out(kTokens * kHeads * kDim);
  attention.forward(ctx, rope_rows, q.data(), k.data(), v.data(), cache, attention_batch,
                    out.data());
  EXPECT_EQ(q, q_rot);  // q is rotated in place
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], want[i], 1e-5) << i;
}

TEST(Activation, GrowsToTheLargestBatchAndKeepsItsMemoryForSmallerOnes) {
  const ExecutionContext ctx = host_execution_context();
  Activation a(100);
  a.reserve(ctx, 3);
  float* first = a.data();
  ASSERT_NE(first, nullptr);
  a.row(2)[99] = 1.0f;  // the last value of the last row is in bounds
  a.reserve(ctx, 2);
  EXPECT_EQ(a.data(), first);  // no allocation for a smaller step
  a.reserve(ctx, 50);
  EXPECT_EQ(a.row(49) - a.data(), 4900);
}

TEST(Residual, AddsInPlace) {
  const ExecutionContext ctx = host_execution_context();
  std::vector<float> h = {1, 2, 3};
  const std::vector<float> x = {0.5f, -2, 4};
  add_residual(ctx, h.data(), x.data(), 3);
  EXPECT_EQ(h, (std::vector<float>{1.5f, 0, 7}));
}

}  // namespace
}  // namespace pagoda
