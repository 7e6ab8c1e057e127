// The threaded ops: splitting rows or tokens across threads must give what one kernel call on
// the whole range gives (bit for bit: each output element is computed by the same code), and
// the row-wise ops must apply their kernel to every row.
#include "kernels/ops.h"
#include "kernels/activation_reuse.h"
#include "kernels/quantize.h"

#include <omp.h>

#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "util/half.h"

namespace pagoda {
namespace {

std::vector<float> random_floats(std::mt19937& rng, size_t n) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

class OpsTest : public ::testing::Test {
 protected:
  // 3 threads on any machine: shares that do not divide the rows evenly.
  void SetUp() override {
    saved_threads_ = omp_get_max_threads();
    omp_set_num_threads(3);
  }
  void TearDown() override { omp_set_num_threads(saved_threads_); }
  int saved_threads_ = 1;
  std::mt19937 rng_{99};
};

TEST_F(OpsTest, MatmulSplitsMatchOneCall) {
  struct Shape {
    int64_t rows, cols, tokens;
  };
  // Row split (many rows), token split (few rows, many tokens), decode, and a bf16 case.
  const Shape shapes[] = {
      {1000, 300, 1}, {1000, 300, 9}, {40, 256, 50}, {40, 256, 7}, {203, 129, 5}};
  for (const Shape& s : shapes) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      std::vector<float> wf = random_floats(rng_, s.rows * s.cols);
      std::vector<uint16_t> wb(wf.size());
      for (size_t i = 0; i < wf.size(); ++i) wb[i] = f32_to_bf16(wf[i]);
      const WeightView w{dtype == DType::kF32 ? static_cast<const void*>(wf.data()) : wb.data(),
                         dtype, s.rows, s.cols};
      const std::vector<float> x = random_floats(rng_, s.tokens * s.cols);
      const int64_t ldy = s.rows + 5;
      std::vector<float> expected(s.tokens * ldy, 3.0f), actual(s.tokens * ldy, 3.0f);
      kernels().matmul(x.data(), s.tokens, w, 0, s.rows, expected.data(), ldy);
      ops::matmul(x.data(), s.tokens, w, actual.data(), ldy);
      // Bit-exact: a dot product's summation order depends neither on the row range nor on the
      // number of tokens in the call (the kernels are batch-invariant by design).
      ASSERT_EQ(actual, expected) << "rows=" << s.rows << " tokens=" << s.tokens << " "
                                  << dtype_name(dtype);
    }
  }
}

// Several matmuls in one region give each job the bits of its own call, whatever the mix of
// shapes, types (W8A8 included, which quantizes activations inside each call) and output
// strides; small batches run serially and must agree too.
TEST_F(OpsTest, MatmulBatchMatchesOneCallPerJob) {
  struct Shape {
    int64_t rows, cols, tokens;
  };
  const Shape shapes[] = {{1000, 256, 1}, {40, 256, 3}, {203, 128, 5}, {8, 64, 1}, {512, 96, 17}};
  std::vector<std::vector<float>> weights, inputs;
  std::vector<QuantizedMatrix> quantized;
  std::vector<WeightView> views;
  for (const Shape& s : shapes) {
    weights.push_back(random_floats(rng_, s.rows * s.cols));
    inputs.push_back(random_floats(rng_, s.tokens * s.cols));
    views.push_back(WeightView{weights.back().data(), DType::kF32, s.rows, s.cols});
  }
  // The same matrices again as W8A8 int8 in groups of 32.
  for (size_t i = 0; i < std::size(shapes); ++i) {
    quantized.push_back(quantize_matrix(views[i], DType::kI8, 32));
    quantized.back().view.int8_activations = true;
  }
  for (bool w8a8 : {false, true}) {
    for (size_t count : {size_t{1}, size_t{2}, std::size(shapes)}) {
      std::vector<ops::MatmulJob> jobs;
      std::vector<std::vector<float>> expected, actual;
      for (size_t i = 0; i < count; ++i) {
        const Shape& s = shapes[i];
        const int64_t ldy = s.rows + 3;
        expected.emplace_back(static_cast<size_t>(s.tokens * ldy), 7.0f);
        actual.emplace_back(static_cast<size_t>(s.tokens * ldy), 7.0f);
      }
      for (size_t i = 0; i < count; ++i) {
        const Shape& s = shapes[i];
        const WeightView& w = w8a8 ? quantized[i].view : views[i];
        kernels().matmul(inputs[i].data(), s.tokens, w, 0, s.rows, expected[i].data(), s.rows + 3);
        jobs.push_back({inputs[i].data(), s.tokens, &w, actual[i].data(), s.rows + 3});
      }
      ops::matmul_batch(jobs);
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(actual[i], expected[i])
            << "job " << i << " of " << count << (w8a8 ? " w8a8" : "");
      }
    }
  }
}

// Few tokens are handed out in row chunks, and jobs reading one x (q, k, v) share the
// activations each thread quantized, inside one matmul_batch only. Every quantized path
// (int8 in blocks and per channel, int4 with zero points and symmetric), rows enough for
// several chunks per thread; then x changes in place and the next batch must see the change.
TEST_F(OpsTest, MatmulBatchReusesActivationsOnlyWithinOneBatch) {
  const int64_t rows = 1000, cols = 2048;
  const std::vector<float> wf = random_floats(rng_, rows * cols);
  const WeightView source{wf.data(), DType::kF32, rows, cols};
  std::vector<QuantizedMatrix> matrices;
  matrices.push_back(quantize_matrix(source, DType::kI8, 32));
  matrices.push_back(quantize_matrix(source, DType::kI8, 0));
  matrices.push_back(quantize_matrix(source, DType::kI4, 32));
  matrices.push_back(quantize_matrix(source, DType::kI4, 128));
  matrices.push_back(quantize_matrix(source, DType::kI4, 32));
  QuantizedMatrix& symmetric = matrices.back();
  for (int64_t i = 0; i < rows * cols / 32; ++i) {
    symmetric.mins[i] = f32_to_f16(-8.0f * f16_to_f32(symmetric.scales[i]));
  }
  symmetric.view.symmetric_int4 = true;
  for (QuantizedMatrix& m : matrices) m.view.int8_activations = true;
  for (int64_t tokens : {1, 2, 5}) {
    std::vector<float> x = random_floats(rng_, tokens * cols);
    for (int round = 0; round < 2; ++round) {
      // The expectation reads another buffer, so nothing a kernel kept can stand in for it.
      const std::vector<float> x_copy = x;
      std::vector<ops::MatmulJob> jobs;
      std::vector<std::vector<float>> expected, actual;
      for (const QuantizedMatrix& m : matrices) {
        expected.emplace_back(static_cast<size_t>(tokens * rows));
        actual.emplace_back(static_cast<size_t>(tokens * rows), 7.0f);
        kernels().matmul(x_copy.data(), tokens, m.view, 0, rows, expected.back().data(), rows);
        jobs.push_back({x.data(), tokens, &m.view, actual.back().data(), rows});
      }
      ops::matmul_batch(jobs);
      for (size_t i = 0; i < matrices.size(); ++i) {
        ASSERT_EQ(actual[i], expected[i])
            << "job " << i << " tokens " << tokens << " round " << round;
      }
      for (float& v : x) v = 0.25f - 0.5f * v;  // same buffer, new activations
    }
  }
}

TEST(ActivationReuseScope, EveryScopeIsNewAndNestedScopesRestoreTheEnclosingOne) {
  EXPECT_EQ(activation_reuse_scope(), 0u);
  uint64_t first = 0;
  {
    const ActivationReuseScope outer;
    first = activation_reuse_scope();
    EXPECT_NE(first, 0u);
    {
      const ActivationReuseScope inner;
      EXPECT_NE(activation_reuse_scope(), first);
    }
    EXPECT_EQ(activation_reuse_scope(), first);
  }
  EXPECT_EQ(activation_reuse_scope(), 0u);
  const ActivationReuseScope again;
  EXPECT_NE(activation_reuse_scope(), first);
}

TEST_F(OpsTest, RowWiseOpsApplyTheKernelToEveryRow) {
  const int64_t num_rows = 37, n = 1000;
  const std::vector<float> x = random_floats(rng_, num_rows * n);
  const std::vector<float> weight = random_floats(rng_, n);
  std::vector<float> out(num_rows * n), expected(n);
  ops::rms_norm_rows(x.data(), weight.data(), 1e-6f, num_rows, n, out.data());
  for (int64_t i = 0; i < num_rows; ++i) {
    kernels().rms_norm(x.data() + i * n, weight.data(), 1e-6f, n, expected.data());
    ASSERT_EQ(std::vector<float>(out.begin() + i * n, out.begin() + (i + 1) * n), expected) << i;
  }

  std::vector<float> residual = random_floats(rng_, num_rows * n), residual_copy = residual;
  ops::add_rms_norm_rows(residual.data(), x.data(), weight.data(), 1e-6f, num_rows, n, out.data());
  for (int64_t i = 0; i < num_rows; ++i) {
    kernels().add_rms_norm(residual_copy.data() + i * n, x.data() + i * n, weight.data(), 1e-6f, n,
                           expected.data());
    ASSERT_EQ(std::vector<float>(out.begin() + i * n, out.begin() + (i + 1) * n), expected) << i;
  }
  EXPECT_EQ(residual, residual_copy);

  const std::vector<float> gate_up = random_floats(rng_, num_rows * 2 * n);
  std::vector<float> fused(num_rows * n);
  ops::silu_mul_fused(gate_up.data(), num_rows, n, fused.data());
  std::vector<float> gate(num_rows * n), up(num_rows * n), split(num_rows * n);
  for (int64_t i = 0; i < num_rows; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      gate[i * n + j] = gate_up[i * 2 * n + j];
      up[i * n + j] = gate_up[i * 2 * n + n + j];
    }
  }
  ops::silu_mul(gate.data(), up.data(), num_rows * n, split.data());
  EXPECT_EQ(fused, split);
  // And the values are SiLU(g) * u (1e-5 relative: the vector exp, see kernel_table_test).
  for (size_t i = 0; i < split.size(); i += 97) {
    const double ref = gate[i] / (1.0 + std::exp(-double{gate[i]})) * up[i];
    ASSERT_NEAR(split[i], ref, 1e-5 * std::fabs(ref) + 1e-7);
  }
}

TEST_F(OpsTest, EmbeddingLookupWidensTheChosenRows) {
  const int64_t vocab = 11, dim = 19;
  std::vector<uint16_t> table(vocab * dim);
  for (size_t i = 0; i < table.size(); ++i) table[i] = f32_to_bf16(static_cast<float>(i) * 0.5f);
  const int32_t ids[] = {10, 0, 3, 3};
  std::vector<float> out(4 * dim);
  ops::embedding_lookup(WeightView{table.data(), DType::kBF16, vocab, dim}, ids, 4, out.data());
  for (int t = 0; t < 4; ++t) {
    for (int64_t d = 0; d < dim; ++d) {
      ASSERT_EQ(out[t * dim + d], bf16_to_f32(table[ids[t] * dim + d])) << t << "," << d;
    }
  }
}

}  // namespace
}  // namespace pagoda
