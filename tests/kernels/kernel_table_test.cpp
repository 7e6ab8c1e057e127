// Every entry of every kernel table this CPU can run, compared with the scalar reference on
// random data with awkward sizes (tails shorter than a vector, rows not a multiple of the
// register blocking, 1..37 tokens), plus hand-checked values for the scalar table itself.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/kernels.h"
#include "kernels/tables.h"
#include "util/cpu_features.h"
#include "util/error.h"
#include "util/half.h"

namespace pagoda {
namespace {

// Unit roundoff of fp32. Two fp32 sums of n products that differ only in order are each within
// n * u * sum|x_i w_i| of the exact sum (Higham, gamma_n), hence within 2 n u of each other.
constexpr double kUnitRoundoff = 5.9604644775390625e-8;  // 2^-24

std::vector<float> random_floats(std::mt19937& rng, int64_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// A weight matrix in each stored type, plus its exact fp32 values (for error bounds).
struct TestWeights {
  std::vector<float> f32;        // values as the kernel sees them after widening
  std::vector<uint16_t> bits16;  // storage for bf16/f16
  WeightView view;
};

TestWeights make_weights(std::mt19937& rng, DType dtype, int64_t rows, int64_t cols) {
  TestWeights w;
  w.f32 = random_floats(rng, rows * cols);
  if (dtype != DType::kF32) {
    w.bits16.resize(w.f32.size());
    for (size_t i = 0; i < w.f32.size(); ++i) {
      w.bits16[i] = dtype == DType::kBF16 ? f32_to_bf16(w.f32[i]) : f32_to_f16(w.f32[i]);
      w.f32[i] = dtype == DType::kBF16 ? bf16_to_f32(w.bits16[i]) : f16_to_f32(w.bits16[i]);
    }
  }
  const void* data = dtype == DType::kF32 ? static_cast<const void*>(w.f32.data())
                                          : static_cast<const void*>(w.bits16.data());
  w.view = WeightView{data, dtype, rows, cols};
  return w;
}

// A table with KernelTable::f16_arithmetic multiplies f16 weights (and fp16 cache rows) in
// fp16 (arm/fp16_kernels.h): x is scaled by 2^-k into [8, 16) and rounded to fp16 (u = 2^-11
// per product), runs of 8 products per lane are summed in fp16 (8 u), then in fp32: 10 u
// sum|x w| with slack for the fp32 part. Where a scaled product or sum falls below fp16's
// normal range, each step (n of them, the runs' flushes and the rounding of x, weighted by
// |w|) may be off by half the subnormal spacing, 2^-25 * 2^k <= 2^-28 * max|x|.
double f16_arithmetic_bound(const float* x, const float* w, int64_t n) {
  double sum_abs = 0.0, sum_w = 0.0, absmax = 0.0;
  for (int64_t c = 0; c < n; ++c) {
    sum_abs += std::fabs(double{x[c]} * w[c]);
    sum_w += std::fabs(double{w[c]});
    absmax = std::max(absmax, std::fabs(double{x[c]}));
  }
  return 10.0 * std::ldexp(1.0, -11) * sum_abs + (n + 8 + sum_w) * std::ldexp(1.0, -28) * absmax;
}

// The value sums (axpy_rows, attention_values) of such a table on fp16 rows, for one output
// element y += sum_j c_j v_j (arm/fp16_values.h): c scaled by 2^-k so max|c| lands in
// [1/32, 1/16) and rounded to fp16, runs of 8 rows summed in fp16, then added into fp32:
// 10 u sum|c v| as above; near fp16's subnormals each step (the rounding of every c, every
// product, every run's flush, weighted by |v|) may be off by 2^-25 * 2^k <= 2^-20 * max|c|.
double f16_value_bound(const float* c, const float* v, int64_t v_stride, int64_t num_rows) {
  double sum_abs = 0.0, sum_v = 0.0, absmax = 0.0;
  for (int64_t j = 0; j < num_rows; ++j) {
    const double vj = v[j * v_stride];
    sum_abs += std::fabs(double{c[j]} * vj);
    sum_v += std::fabs(vj);
    absmax = std::max(absmax, std::fabs(double{c[j]}));
  }
  return 10.0 * std::ldexp(1.0, -11) * sum_abs +
         (2.0 * num_rows + 8 + sum_v) * std::ldexp(1.0, -20) * absmax;
}

class KernelIsaTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    table_ = kernels_for(GetParam());
    if (table_ == nullptr) GTEST_SKIP() << "this CPU cannot run " << GetParam();
  }
  const KernelTable& scalar() const { return *kernels_for("scalar"); }
  const KernelTable* table_ = nullptr;
  std::mt19937 rng_{1234};
};

constexpr DType kFloatDtypes[] = {DType::kF32, DType::kBF16, DType::kF16};

const KernelTable& scalar_table() {
  return *kernels_for("scalar");
}

// The checks of table.matmul below are functions of the table, so that the bf16 kernel with
// emulated instructions (EmulatedBf16Dot, at the end) runs the same ones.

void expect_matmul_matches_scalar(const KernelTable& table, std::span<const DType> dtypes,
                                  std::mt19937& rng) {
  const int64_t kRows = 37;  // not a multiple of the 4-row tile nor the 16-row panel
  const int64_t kLdy = kRows + 3;
  const int64_t token_counts[] = {1, 2, 3, 4, 5, 6, 7, 9, 13, 17, 37};
  // 48, 56, 64: one or two whole 32-column chunks, then 2, 3 or no 8-column steps (the bfmmla
  // tiles of arm/bf16_mmla_kernels.h finish the columns past the chunks on bfdot).
  const int64_t col_counts[] = {1, 7, 16, 33, 48, 56, 64, 100, 257};
  for (DType dtype : dtypes) {
    for (int64_t cols : col_counts) {
      TestWeights w = make_weights(rng, dtype, kRows, cols);
      for (int64_t num_tokens : token_counts) {
        const std::vector<float> x = random_floats(rng, num_tokens * cols);
        // Rows [3, 36): an unaligned range, as a thread's share would be.
        const int64_t row_begin = 3, row_end = 36;
        std::vector<float> expected(num_tokens * kLdy, -7.0f), actual(num_tokens * kLdy, -7.0f);
        scalar_table().matmul(x.data(), num_tokens, w.view, row_begin, row_end, expected.data(),
                              kLdy);
        table.matmul(x.data(), num_tokens, w.view, row_begin, row_end, actual.data(), kLdy);
        const bool bf16_rounding = dtype == DType::kBF16 && table.matmul_bf16_activations;
        for (int64_t t = 0; t < num_tokens; ++t) {
          for (int64_t r = 0; r < kLdy; ++r) {
            const float got = actual[t * kLdy + r];
            if (r < row_begin || r >= row_end) {
              ASSERT_EQ(got, -7.0f) << "wrote outside rows [3, 36) at t=" << t << " r=" << r;
              continue;
            }
            double sum_abs = 0.0;
            for (int64_t c = 0; c < cols; ++c) {
              sum_abs += std::fabs(double{x[t * cols + c]} * w.f32[r * cols + c]);
            }
            // Reordered fp32 sums: 2 n u sum|xw| (see kUnitRoundoff). With vdpbf16ps each x is
            // rounded to bf16 first: a further 2^-8 relative error per product.
            double tolerance = 2.0 * cols * kUnitRoundoff * sum_abs + 1e-30;
            if (bf16_rounding) tolerance += sum_abs / 256.0;
            if (dtype == DType::kF16 && table.f16_arithmetic) {
              tolerance += f16_arithmetic_bound(&x[t * cols], &w.f32[r * cols], cols);
            }
            ASSERT_NEAR(got, expected[t * kLdy + r], tolerance)
                << dtype_name(dtype) << " cols=" << cols << " tokens=" << num_tokens << " t=" << t
                << " r=" << r;
          }
        }
      }
    }
  }
}

void expect_matmul_batch_invariant(const KernelTable& table, std::span<const DType> dtypes,
                                   std::mt19937& rng) {
  // A token's output must be bit-identical whatever batch it is computed in (1 token, a few,
  // or enough for the many-token path), so that a request's greedy output does not depend on
  // what the scheduler batched it with. Exact equality, no tolerance: that is the property.
  const int64_t rows = 13;
  for (DType dtype : dtypes) {
    for (int64_t cols : {7, 33, 257, 2051}) {
      TestWeights w = make_weights(rng, dtype, rows, cols);
      const int64_t kBatch = 200;  // more than one block of the many-token sweep
      const std::vector<float> x = random_floats(rng, kBatch * cols);
      std::vector<float> batched(kBatch * rows);
      table.matmul(x.data(), kBatch, w.view, 0, rows, batched.data(), rows);
      for (int64_t group : {1, 2, 3, 5, 12, 17, 100}) {
        for (int64_t t0 = 0; t0 + group <= kBatch; t0 += group) {
          std::vector<float> part(group * rows);
          table.matmul(x.data() + t0 * cols, group, w.view, 0, rows, part.data(), rows);
          for (int64_t i = 0; i < group * rows; ++i) {
            ASSERT_EQ(part[i], batched[t0 * rows + i])
                << dtype_name(dtype) << " cols=" << cols << " group=" << group << " token "
                << t0 + i / rows << " row " << i % rows;
          }
        }
      }
    }
  }
}

uint32_t float_bits(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  return bits;
}

void expect_matmul_results_independent_of_neighbours(const KernelTable& table,
                                                     std::span<const DType> dtypes,
                                                     std::mt19937& rng) {
  // A token's result must come from its own values and its row's only: matrix-multiply
  // instructions (bfmmla, smmla) put two tokens and two rows in one instruction, and a tile
  // repeats the last row or token of a ragged edge. Here every other token of the batch (or
  // every other row of the weights) is NaN or inf: the token (row) must get the bits it gets
  // alone, in every position of tiles with ragged rows and tokens.
  const float kPoisons[] = {std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity()};
  for (DType dtype : dtypes) {
    for (int64_t cols : {8, 24, 41, 64, 95}) {
      for (int64_t rows : {1, 2, 3, 5}) {
        TestWeights w = make_weights(rng, dtype, rows, cols);
        for (int64_t num_tokens : {2, 3, 8, 9}) {
          const std::vector<float> x = random_floats(rng, num_tokens * cols);
          std::vector<float> clean(num_tokens * rows);
          table.matmul(x.data(), num_tokens, w.view, 0, rows, clean.data(), rows);
          for (int64_t t = 0; t < num_tokens; ++t) {
            std::vector<float> alone(rows);
            table.matmul(x.data() + t * cols, 1, w.view, 0, rows, alone.data(), rows);
            for (float poison : kPoisons) {
              std::vector<float> poisoned(x.size(), poison), y(num_tokens * rows);
              std::copy_n(x.begin() + t * cols, cols, poisoned.begin() + t * cols);
              table.matmul(poisoned.data(), num_tokens, w.view, 0, rows, y.data(), rows);
              for (int64_t r = 0; r < rows; ++r) {
                ASSERT_EQ(float_bits(y[t * rows + r]), float_bits(alone[r]))
                    << dtype_name(dtype) << " cols=" << cols << " rows=" << rows
                    << " tokens=" << num_tokens << " token " << t << " row " << r
                    << " among tokens of " << poison;
                ASSERT_EQ(float_bits(clean[t * rows + r]), float_bits(alone[r]))
                    << dtype_name(dtype) << " cols=" << cols << " tokens=" << num_tokens;
              }
            }
          }
          for (int64_t r = 0; r < rows; ++r) {
            for (float poison : kPoisons) {
              TestWeights poisoned = w;  // every row but r poisoned
              for (int64_t other = 0; other < rows; ++other) {
                if (other == r) continue;
                for (int64_t c = 0; c < cols; ++c) {
                  const int64_t i = other * cols + c;
                  if (dtype == DType::kF32) {
                    poisoned.f32[i] = poison;
                  } else {
                    poisoned.bits16[i] =
                        dtype == DType::kBF16 ? f32_to_bf16(poison) : f32_to_f16(poison);
                  }
                }
              }
              poisoned.view.data = dtype == DType::kF32
                                       ? static_cast<const void*>(poisoned.f32.data())
                                       : static_cast<const void*>(poisoned.bits16.data());
              std::vector<float> y(num_tokens * rows);
              table.matmul(x.data(), num_tokens, poisoned.view, 0, rows, y.data(), rows);
              for (int64_t t = 0; t < num_tokens; ++t) {
                ASSERT_EQ(float_bits(y[t * rows + r]), float_bits(clean[t * rows + r]))
                    << dtype_name(dtype) << " cols=" << cols << " rows=" << rows
                    << " tokens=" << num_tokens << " token " << t << " row " << r
                    << " among rows of " << poison;
              }
            }
          }
        }
      }
    }
  }
}

void expect_matmul_bf16_worst_case_rounding_within_bound(const KernelTable& table,
                                                         std::mt19937& rng) {
  // Activations that bf16 rounds by almost half its spacing (1 + 2^-8 - 2^-20 rounds to 1:
  // relative error 2^-8 / (1 + 2^-8)), all of one sign against weights of the same sign, so
  // that the roundings add up instead of cancelling: the error of a table that rounds x to
  // bf16 comes within 0.4% of Σ|x w| / 256, the bound KernelTable::matmul_bf16_activations
  // promises, and the fp32 sums (for bfdot / bfmmla, BFDotAdd's round-to-odd steps) must fit in
  // the 2 n u Σ|x w| beside it. A sum over 2051 columns, for 1 token (decode) and for 9 (the
  // many-token tiles).
  const int64_t rows = 5, cols = 2051;
  TestWeights w = make_weights(rng, DType::kBF16, rows, cols);
  for (int64_t i = 0; i < rows * cols; ++i) {
    w.bits16[i] &= 0x7fff;  // |w|
    w.f32[i] = bf16_to_f32(w.bits16[i]);
  }
  std::uniform_int_distribution<int> exponent(-3, 3);
  for (int64_t num_tokens : {1, 9}) {
    std::vector<float> x(num_tokens * cols);
    for (float& v : x) v = std::ldexp(1.0f + 0x1p-8f - 0x1p-20f, exponent(rng));
    std::vector<float> expected(num_tokens * rows), actual(num_tokens * rows);
    scalar_table().matmul(x.data(), num_tokens, w.view, 0, rows, expected.data(), rows);
    table.matmul(x.data(), num_tokens, w.view, 0, rows, actual.data(), rows);
    for (int64_t t = 0; t < num_tokens; ++t) {
      for (int64_t r = 0; r < rows; ++r) {
        double sum_abs = 0.0;
        for (int64_t c = 0; c < cols; ++c) sum_abs += double{x[t * cols + c]} * w.f32[r * cols + c];
        double tolerance = 2.0 * cols * kUnitRoundoff * sum_abs;
        if (table.matmul_bf16_activations) tolerance += sum_abs / 256.0;
        ASSERT_NEAR(actual[t * rows + r], expected[t * rows + r], tolerance)
            << "tokens=" << num_tokens << " t=" << t << " r=" << r;
      }
    }
  }
}

void expect_matmul_outer_blocks_batch_invariant(const KernelTable& table,
                                                std::span<const DType> dtypes, std::mt19937& rng) {
  // A prefill whose x exceeds one outer block of tokens (4 MiB of x, simd_kernels.h: 64 tokens
  // at 16411 fp32 columns, 128 rounded to bf16 for vdpbf16ps) is swept a block at a time; every
  // token must still get the bits it gets alone.
  const int64_t rows = 5, cols = 16411, num_tokens = 150;
  for (DType dtype : dtypes) {
    TestWeights w = make_weights(rng, dtype, rows, cols);
    const std::vector<float> x = random_floats(rng, num_tokens * cols);
    std::vector<float> batched(num_tokens * rows), alone(rows);
    table.matmul(x.data(), num_tokens, w.view, 0, rows, batched.data(), rows);
    for (int64_t t = 0; t < num_tokens; ++t) {
      table.matmul(x.data() + t * cols, 1, w.view, 0, rows, alone.data(), rows);
      for (int64_t r = 0; r < rows; ++r) {
        ASSERT_EQ(alone[r], batched[t * rows + r])
            << dtype_name(dtype) << " token " << t << " row " << r;
      }
    }
  }
}

void expect_matmul_large_decode_shape_matches_scalar(const KernelTable& table,
                                                     std::span<const DType> dtypes,
                                                     std::mt19937& rng) {
  // A decode-sized row (cols 2048 + 5) over many rows exercises the unrolled main loop and the
  // prefetch; few rows keep the scalar reference quick under sanitizers.
  const int64_t rows = 19, cols = 2053;
  for (DType dtype : dtypes) {
    TestWeights w = make_weights(rng, dtype, rows, cols);
    const std::vector<float> x = random_floats(rng, cols);
    std::vector<float> expected(rows), actual(rows);
    scalar_table().matmul(x.data(), 1, w.view, 0, rows, expected.data(), rows);
    table.matmul(x.data(), 1, w.view, 0, rows, actual.data(), rows);
    for (int64_t r = 0; r < rows; ++r) {
      double sum_abs = 0.0;
      for (int64_t c = 0; c < cols; ++c) sum_abs += std::fabs(double{x[c]} * w.f32[r * cols + c]);
      double tolerance = 2.0 * cols * kUnitRoundoff * sum_abs;  // reordered fp32 sum
      if (dtype == DType::kBF16 && table.matmul_bf16_activations) tolerance += sum_abs / 256.0;
      if (dtype == DType::kF16 && table.f16_arithmetic) {
        tolerance += f16_arithmetic_bound(x.data(), &w.f32[r * cols], cols);
      }
      ASSERT_NEAR(actual[r], expected[r], tolerance) << dtype_name(dtype) << " row " << r;
    }
  }
}

TEST_P(KernelIsaTest, MatmulMatchesScalarForEveryDtypeAndShape) {
  expect_matmul_matches_scalar(*table_, kFloatDtypes, rng_);
}

TEST_P(KernelIsaTest, MatmulIsBatchInvariant) {
  expect_matmul_batch_invariant(*table_, kFloatDtypes, rng_);
}

TEST_P(KernelIsaTest, MatmulResultsIndependentOfNeighbouringTokensAndRows) {
  expect_matmul_results_independent_of_neighbours(*table_, kFloatDtypes, rng_);
}

TEST_P(KernelIsaTest, MatmulBf16WorstCaseRoundingWithinBound) {
  expect_matmul_bf16_worst_case_rounding_within_bound(*table_, rng_);
}

TEST_P(KernelIsaTest, MatmulOuterTokenBlocksAreBatchInvariant) {
  expect_matmul_outer_blocks_batch_invariant(*table_, kFloatDtypes, rng_);
}

TEST_P(KernelIsaTest, MatmulLargeDecodeShape) {
  expect_matmul_large_decode_shape_matches_scalar(*table_, kFloatDtypes, rng_);
}

TEST_P(KernelIsaTest, MatmulF16WithLargeAndTinyActivations) {
  // Activations far outside fp16's range (1e5: products would overflow it) or deep in its
  // subnormals (1e-6): fp16 arithmetic scales them by a power of two first, so the result
  // stays within the same relative bound as for x in [-1, 1].
  const int64_t rows = 9, cols = 300;
  TestWeights w = make_weights(rng_, DType::kF16, rows, cols);
  for (float magnitude : {1e5f, 1e-6f}) {
    for (int64_t num_tokens : {1, 5}) {
      std::vector<float> x = random_floats(rng_, num_tokens * cols);
      for (float& v : x) v *= magnitude;
      std::vector<float> expected(num_tokens * rows), actual(num_tokens * rows);
      scalar().matmul(x.data(), num_tokens, w.view, 0, rows, expected.data(), rows);
      table_->matmul(x.data(), num_tokens, w.view, 0, rows, actual.data(), rows);
      for (int64_t t = 0; t < num_tokens; ++t) {
        for (int64_t r = 0; r < rows; ++r) {
          double sum_abs = 0.0;
          for (int64_t c = 0; c < cols; ++c) {
            sum_abs += std::fabs(double{x[t * cols + c]} * w.f32[r * cols + c]);
          }
          double tolerance = 2.0 * cols * kUnitRoundoff * sum_abs;
          if (table_->f16_arithmetic) {
            tolerance += f16_arithmetic_bound(&x[t * cols], &w.f32[r * cols], cols);
          }
          ASSERT_NEAR(actual[t * rows + r], expected[t * rows + r], tolerance)
              << "magnitude " << magnitude << " t=" << t << " r=" << r;
        }
      }
    }
  }
}

TEST_P(KernelIsaTest, RmsNormAndFusedAdd) {
  for (int64_t n : {1, 7, 8, 33, 2051}) {
    const std::vector<float> x = random_floats(rng_, n, -3.0f, 3.0f);
    const std::vector<float> weight = random_floats(rng_, n, 0.5f, 1.5f);
    std::vector<float> expected(n), actual(n);
    scalar().rms_norm(x.data(), weight.data(), 1e-6f, n, expected.data());
    table_->rms_norm(x.data(), weight.data(), 1e-6f, n, actual.data());
    for (int64_t i = 0; i < n; ++i) {
      // Only the sum of squares is reordered: relative 2 n u on it, half that after the sqrt,
      // plus a few roundings in the scaling.
      ASSERT_NEAR(actual[i], expected[i],
                  (n * kUnitRoundoff + 8 * kUnitRoundoff) * std::fabs(expected[i]) + 1e-7)
          << "n=" << n << " i=" << i;
    }

    const std::vector<float> delta = random_floats(rng_, n);
    std::vector<float> res_expected = x, res_actual = x;
    scalar().add_rms_norm(res_expected.data(), delta.data(), weight.data(), 1e-5f, n,
                          expected.data());
    table_->add_rms_norm(res_actual.data(), delta.data(), weight.data(), 1e-5f, n, actual.data());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(res_actual[i], res_expected[i]) << "residual add is one rounding: exact, i=" << i;
      ASSERT_NEAR(actual[i], expected[i],
                  (n * kUnitRoundoff + 8 * kUnitRoundoff) * std::fabs(expected[i]) + 1e-7);
    }
  }
}

TEST_P(KernelIsaTest, SiluMul) {
  for (int64_t n : {1, 5, 8, 17, 1000}) {
    std::vector<float> gate = random_floats(rng_, n, -20.0f, 20.0f);
    if (n > 3) gate[0] = -100.0f, gate[1] = 100.0f, gate[2] = 0.0f;  // saturation and zero
    const std::vector<float> up = random_floats(rng_, n, -2.0f, 2.0f);
    std::vector<float> expected(n), actual(n);
    scalar().silu_mul(gate.data(), up.data(), n, expected.data());
    table_->silu_mul(gate.data(), up.data(), n, actual.data());
    for (int64_t i = 0; i < n; ++i) {
      // The vector exp is within ~2e-7 relative of libm; 1e-5 relative leaves room for the
      // divide, and 1e-30 absolute covers e^-100 underflowing differently.
      ASSERT_NEAR(actual[i], expected[i], 1e-5 * std::fabs(expected[i]) + 1e-30) << "g=" << gate[i];
    }
  }
}

TEST_P(KernelIsaTest, Softmax) {
  for (int64_t n : {1, 3, 8, 9, 31, 4099}) {
    std::vector<float> x = random_floats(rng_, n, -30.0f, 30.0f);
    if (n > 2) x[n - 1] = 80.0f;  // a dominant logit in the tail
    std::vector<float> expected = x, actual = x;
    scalar().softmax(expected.data(), n);
    table_->softmax(actual.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      // exp within ~2e-7 relative and a reordered sum of n terms: 1e-5 relative; values below
      // e^-87 (clamped in the vector exp) may differ by 1e-37 absolute.
      ASSERT_NEAR(actual[i], expected[i], 1e-5 * expected[i] + 1e-37) << "n=" << n << " i=" << i;
    }
  }
}

TEST_P(KernelIsaTest, ExpShifted) {
  for (int64_t n : {1, 5, 16, 23, 300}) {
    const std::vector<float> x = random_floats(rng_, n, -40.0f, 10.0f);
    std::vector<float> expected = x, actual = x;
    const float sum_expected = scalar().exp_shifted(expected.data(), 10.0f, n);
    const float sum_actual = table_->exp_shifted(actual.data(), 10.0f, n);
    // exp within ~2e-7 relative; the sum of n positive terms reordered: 2 n u relative.
    ASSERT_NEAR(sum_actual, sum_expected, (2.0 * n * kUnitRoundoff + 1e-6) * sum_expected);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(actual[i], expected[i], 1e-6 * expected[i]) << i;
  }
}

TEST_P(KernelIsaTest, DotAndAxpy) {
  for (int64_t n : {1, 7, 16, 129, 576}) {
    const std::vector<float> a = random_floats(rng_, n), b = random_floats(rng_, n);
    double sum_abs = 0.0;
    for (int64_t i = 0; i < n; ++i) sum_abs += std::fabs(double{a[i]} * b[i]);
    ASSERT_NEAR(table_->dot(a.data(), b.data(), n), scalar().dot(a.data(), b.data(), n),
                2.0 * n * kUnitRoundoff * sum_abs)  // reordered fp32 sum
        << "n=" << n;

    std::vector<float> expected = b, actual = b;
    scalar().axpy(0.37f, a.data(), n, expected.data());
    table_->axpy(0.37f, a.data(), n, actual.data());
    for (int64_t i = 0; i < n; ++i) {
      // FMA rounds once, multiply-then-add twice: at most one rounding of |a x| apart.
      ASSERT_NEAR(actual[i], expected[i],
                  2 * kUnitRoundoff * (std::fabs(0.37 * a[i]) + std::fabs(b[i])));
    }
  }
}

TEST_P(KernelIsaTest, DotRowsAndAxpyRowsEqualTheOneRowCalls) {
  // Bit for bit what dot / axpy give row by row on the rows widened to fp32 (attention relies on
  // it for batch invariance, and a 16-bit KV cache on the widening being exact), for row counts
  // around the 4-row groups and lengths around the 8-vector chunks, in every cache dtype.
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t n : {1, 7, 16, 64, 129, 512, 576}) {
      for (int64_t num_rows : {1, 3, 4, 9, 16}) {
        const int64_t stride = n + 5;  // rows of a paged cache are interleaved with other heads
        const std::vector<float> a = random_floats(rng_, n);
        const TestWeights rows = make_weights(rng_, dtype, num_rows, stride);
        const std::vector<float> coeffs = random_floats(rng_, num_rows);
        std::vector<float> out(num_rows);
        table_->dot_rows(a.data(), rows.view.data, dtype, stride, num_rows, n, out.data());
        std::vector<float> y = random_floats(rng_, n), y_rows = y;
        table_->axpy_rows(coeffs.data(), rows.view.data, dtype, stride, num_rows, n, y_rows.data());
        const std::string where = std::string(dtype_name(dtype)) + " n=" + std::to_string(n) +
                                  " rows=" + std::to_string(num_rows);
        for (int64_t j = 0; j < num_rows; ++j) {
          const float* row = rows.f32.data() + j * stride;
          if (dtype == DType::kF16 && table_->f16_arithmetic) {
            // fp16 products (see f16_arithmetic_bound): not dot's bits, but each row's own
            // bits whatever rows it is computed with.
            float alone = 0.0f;
            table_->dot_rows(a.data(), static_cast<const uint16_t*>(rows.view.data) + j * stride,
                             dtype, stride, 1, n, &alone);
            ASSERT_EQ(out[j], alone) << where << " j=" << j;
            double sum_abs = 0.0;
            for (int64_t i = 0; i < n; ++i) sum_abs += std::fabs(double{a[i]} * row[i]);
            ASSERT_NEAR(out[j], table_->dot(a.data(), row, n),
                        2.0 * n * kUnitRoundoff * sum_abs + f16_arithmetic_bound(a.data(), row, n))
                << where << " j=" << j;
          } else {
            ASSERT_EQ(out[j], table_->dot(a.data(), row, n)) << where << " j=" << j;
          }
          table_->axpy(coeffs[j], row, n, y.data());
        }
        if (dtype == DType::kF16 && table_->f16_arithmetic) {
          // fp16 products (f16_value_bound) against the one-row axpy calls, which round in
          // fp32 once per row, and so does the fp32 part here, at most once per row.
          for (int64_t i = 0; i < n; ++i) {
            double sum_abs = std::fabs(double{y[i]});
            for (int64_t j = 0; j < num_rows; ++j) {
              sum_abs += std::fabs(double{coeffs[j]} * rows.f32[j * stride + i]);
            }
            ASSERT_NEAR(y_rows[i], y[i],
                        2.0 * (num_rows + 1) * kUnitRoundoff * sum_abs +
                            f16_value_bound(coeffs.data(), rows.f32.data() + i, stride, num_rows))
                << where << " i=" << i;
          }
          // Each column's bits do not depend on the columns computed with it (the 4-vector
          // chunks, single vectors and the tail): the call on columns [8, n) gives the same.
          if (n > 8) {
            std::vector<float> y_whole = random_floats(rng_, n);
            std::vector<float> y_cols(y_whole.begin() + 8, y_whole.end());
            table_->axpy_rows(coeffs.data(), rows.view.data, dtype, stride, num_rows, n,
                              y_whole.data());
            table_->axpy_rows(coeffs.data(), static_cast<const uint16_t*>(rows.view.data) + 8,
                              dtype, stride, num_rows, n - 8, y_cols.data());
            for (int64_t i = 8; i < n; ++i) ASSERT_EQ(y_cols[i - 8], y_whole[i]) << where;
          }
        } else {
          ASSERT_EQ(y_rows, y) << where;
        }
      }
    }
  }
}

TEST_P(KernelIsaTest, AxpyRowsOnLargeFp16CacheValuesStaysFinite) {
  // Values near fp16's largest (65504) weighted by coefficients up to 1: the fp32 result
  // (up to 16 x 65504) is finite, so the fp16 runs must not overflow (arm/fp16_values.h
  // scales the coefficients so that they cannot).
  const int64_t n = 24, num_rows = 16;
  std::vector<uint16_t> rows(num_rows * n);
  std::vector<float> rows_f32(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    rows[i] = f32_to_f16(i % 3 == 0 ? -65504.0f : 60000.0f + float(i));
    rows_f32[i] = f16_to_f32(rows[i]);
  }
  std::vector<float> coeffs(num_rows);
  for (int64_t j = 0; j < num_rows; ++j) coeffs[j] = j % 5 == 0 ? 1.0f : 0.75f;
  std::vector<float> y(n, 0.0f), expected(n, 0.0f);
  table_->axpy_rows(coeffs.data(), rows.data(), DType::kF16, n, num_rows, n, y.data());
  for (int64_t j = 0; j < num_rows; ++j) {
    scalar().axpy(coeffs[j], rows_f32.data() + j * n, n, expected.data());
  }
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE(std::isfinite(y[i])) << "i=" << i;
    double sum_abs = 0.0;
    for (int64_t j = 0; j < num_rows; ++j) sum_abs += std::fabs(coeffs[j] * rows_f32[j * n + i]);
    double tolerance = 2.0 * (num_rows + 1) * kUnitRoundoff * sum_abs;
    if (table_->f16_arithmetic) {
      tolerance += f16_value_bound(coeffs.data(), rows_f32.data() + i, n, num_rows);
    }
    ASSERT_NEAR(y[i], expected[i], tolerance) << "i=" << i;
  }
}

TEST_P(KernelIsaTest, RopeBothPairings) {
  for (bool neox : {true, false}) {
    // Interleaved pairs on x86 go 8 (AVX2) or 16 (AVX-512) per step, then 4 or 8 at a time
    // (masked): half = 1, 3, 8, 17, 23, 29, 32, 64 reach every tail.
    for (int64_t rotary_dim : {2, 6, 16, 34, 46, 58, 64, 128}) {
      const int64_t head_dim = rotary_dim + 5;  // partial rotary: the tail must be untouched
      const std::vector<float> x = random_floats(rng_, head_dim, -4.0f, 4.0f);
      const std::vector<float> angle = random_floats(rng_, rotary_dim / 2, -3.2f, 3.2f);
      std::vector<float> cos(rotary_dim / 2), sin(rotary_dim / 2);
      for (size_t i = 0; i < angle.size(); ++i)
        cos[i] = std::cos(angle[i]), sin[i] = std::sin(angle[i]);
      const std::string where =
          std::string(neox ? "neox" : "gptj") + " rotary_dim=" + std::to_string(rotary_dim);

      std::vector<float> expected = x, in_place = x;
      scalar().rope(expected.data(), cos.data(), sin.data(), rotary_dim, neox, expected.data());
      table_->rope(in_place.data(), cos.data(), sin.data(), rotary_dim, neox, in_place.data());
      for (int64_t i = 0; i < head_dim; ++i) {
        if (!neox) {
          // Interleaved pairs: every table does the scalar's two products and one sum or
          // difference, unfused (x86/interleaved_rope.h, arm/arm_table.h), so the same bits.
          ASSERT_EQ(in_place[i], expected[i]) << where << " i=" << i;
          continue;
        }
        // Two products and a sum; FMA may skip one rounding: 4 u of the magnitudes (|x| <= 4).
        ASSERT_NEAR(in_place[i], expected[i], 4 * kUnitRoundoff * 8.0) << where << " i=" << i;
      }

      // Out of place: the same bits as in place (the fused cache write relies on it), and
      // out's dims past rotary_dim not written.
      const float kSentinel = -123.0f;
      std::vector<float> out(head_dim, kSentinel);
      table_->rope(x.data(), cos.data(), sin.data(), rotary_dim, neox, out.data());
      for (int64_t i = 0; i < head_dim; ++i) {
        ASSERT_EQ(out[i], i < rotary_dim ? in_place[i] : kSentinel) << where << " i=" << i;
      }
    }
  }
}

TEST_P(KernelIsaTest, ToF32IsExactForEveryBitPattern) {
  std::vector<uint16_t> all(65536 + 3);  // + 3: a tail shorter than a vector
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    std::vector<float> expected(all.size()), actual(all.size());
    scalar().to_f32(all.data(), dtype, static_cast<int64_t>(all.size()), expected.data());
    table_->to_f32(all.data(), dtype, static_cast<int64_t>(all.size()), actual.data());
    for (size_t i = 0; i < all.size(); ++i) {
      if (std::isnan(expected[i])) {
        ASSERT_TRUE(std::isnan(actual[i]))
            << dtype_name(dtype) << " bits " << i;  // payload may differ
      } else {
        ASSERT_EQ(actual[i], expected[i])
            << dtype_name(dtype) << " bits " << i;  // widening is exact
      }
    }
  }
  const std::vector<float> f = random_floats(rng_, 21);
  std::vector<float> out(21);
  table_->to_f32(f.data(), DType::kF32, 21, out.data());
  EXPECT_EQ(out, f);
}

// Bits of the fp32 values a 16-bit conversion must get right: every 16-bit value widened (so
// exact values and, with the neighbours, ties and near-ties on both sides), the overflow edge,
// subnormals of both formats, infinities, NaNs with payloads, and random bit patterns.
std::vector<uint32_t> narrowing_cases(std::mt19937& rng) {
  std::vector<uint32_t> bits;
  for (uint32_t h = 0; h < 65536; ++h) {
    for (DType dtype : {DType::kF16, DType::kBF16}) {
      const float f = dtype == DType::kF16 ? f16_to_f32(static_cast<uint16_t>(h))
                                           : bf16_to_f32(static_cast<uint16_t>(h));
      uint32_t u;
      std::memcpy(&u, &f, sizeof u);
      for (uint32_t step : {0u, 1u, 0xfffu, 0x1000u, 0x1001u, 0x7fffu, 0x8000u, 0x8001u}) {
        bits.push_back(u + step);
        bits.push_back(u - step);
      }
    }
  }
  for (uint32_t u : {0x477fefffu, 0x477ff000u, 0x477fffffu, 0x7f7fffffu, 0x7f800000u, 0xff800000u,
                     0x7f800001u, 0xffc12345u, 0x7fbfffffu, 0x00000001u, 0x807fffffu, 0x33000000u,
                     0x33000001u, 0x33800000u, 0xb3400000u}) {
    bits.push_back(u);
  }
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 100000; ++i) bits.push_back(any(rng));
  bits.resize(bits.size() - bits.size() % 64 + 13);  // a tail shorter than a vector
  return bits;
}

TEST_P(KernelIsaTest, FromF32RoundsLikeTheScalarConversionsBitForBit) {
  const std::vector<uint32_t> bits = narrowing_cases(rng_);
  std::vector<float> src(bits.size());
  std::memcpy(src.data(), bits.data(), bits.size() * sizeof(float));
  const auto n = static_cast<int64_t>(src.size());
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    std::vector<uint16_t> actual(src.size());
    table_->from_f32(src.data(), dtype, n, actual.data());
    for (size_t i = 0; i < src.size(); ++i) {
      const uint16_t expected = dtype == DType::kF16 ? f32_to_f16(src[i]) : f32_to_bf16(src[i]);
      ASSERT_EQ(actual[i], expected)
          << dtype_name(dtype) << " of fp32 bits 0x" << std::hex << bits[i];
    }
  }
  std::vector<float> copy(src.size());
  table_->from_f32(src.data(), DType::kF32, n, copy.data());
  EXPECT_EQ(std::memcmp(copy.data(), src.data(), src.size() * sizeof(float)), 0);
}

// Every variant this build has, whether or not this CPU runs it (those it cannot are skipped).
INSTANTIATE_TEST_SUITE_P(AllIsas, KernelIsaTest, ::testing::ValuesIn(kernel_isa_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

// The scalar table against values worked out by hand, so the reference itself is checked.
TEST(ScalarKernels, HandCheckedValues) {
  const KernelTable& k = *kernels_for("scalar");
  // W = [[1, 2], [3, 4], [5, 6]] (bf16 holds these exactly), x = [[1, -1], [2, 0.5]].
  const uint16_t w_bits[] = {f32_to_bf16(1), f32_to_bf16(2), f32_to_bf16(3),
                             f32_to_bf16(4), f32_to_bf16(5), f32_to_bf16(6)};
  const float x[] = {1, -1, 2, 0.5f};
  float y[6];
  k.matmul(x, 2, WeightView{w_bits, DType::kBF16, 3, 2}, 0, 3, y, 3);
  EXPECT_FLOAT_EQ(y[0], -1.0f);
  EXPECT_FLOAT_EQ(y[1], -1.0f);
  EXPECT_FLOAT_EQ(y[2], -1.0f);
  EXPECT_FLOAT_EQ(y[3], 3.0f);
  EXPECT_FLOAT_EQ(y[4], 8.0f);
  EXPECT_FLOAT_EQ(y[5], 13.0f);

  const float v[] = {3, 4};
  const float ones[] = {1, 2};
  float out[2];
  k.rms_norm(v, ones, 0.0f, 2, out);  // rms = sqrt(12.5)
  EXPECT_FLOAT_EQ(out[0], 3.0f / std::sqrt(12.5f));
  EXPECT_FLOAT_EQ(out[1], 2.0f * 4.0f / std::sqrt(12.5f));

  float s[] = {0.0f, std::log(3.0f)};
  k.softmax(s, 2);
  EXPECT_FLOAT_EQ(s[0], 0.25f);
  EXPECT_FLOAT_EQ(s[1], 0.75f);

  const float g[] = {0.0f, 2.0f}, u[] = {5.0f, 3.0f};
  float sm[2];
  k.silu_mul(g, u, 2, sm);
  EXPECT_FLOAT_EQ(sm[0], 0.0f);
  EXPECT_FLOAT_EQ(sm[1], 2.0f / (1.0f + std::exp(-2.0f)) * 3.0f);

  // Rotating (1, 0) by 90 degrees: neox pairs (0, 1) of a 2-dim head, GPT-J pairs (0, 1) too;
  // with 4 dims they differ: neox pairs (0, 2) and (1, 3).
  float neox[] = {1, 2, 3, 4}, gptj[] = {1, 2, 3, 4};
  const float c[] = {0, 1}, sn[] = {1, 0};  // pair 0 by 90 degrees, pair 1 by 0
  k.rope(neox, c, sn, 4, true, neox);
  k.rope(gptj, c, sn, 4, false, gptj);
  EXPECT_EQ(std::vector<float>(neox, neox + 4), (std::vector<float>{-3, 2, 1, 4}));
  EXPECT_EQ(std::vector<float>(gptj, gptj + 4), (std::vector<float>{-2, 1, 3, 4}));
}

TEST(KernelDispatch, NamesAndForce) {
  const std::vector<std::string> names = kernel_isa_names();
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.back(), "scalar");  // the lowest priority: chosen only when nothing else runs
#if defined(__x86_64__)
  EXPECT_EQ(names, (std::vector<std::string>{"avx512", "avx2", "scalar"}));
#elif defined(__aarch64__)
  EXPECT_EQ(names, (std::vector<std::string>{"sve", "neon_bf16", "neon_i8mm", "neon_dotprod",
                                             "neon", "scalar"}));
#endif
  EXPECT_EQ(kernels_for("sse9"), nullptr);
  EXPECT_THROW(set_kernel_isa("sse9"), Error);
  // The default is the first name, in priority order, that this CPU runs.
  const std::string best = kernels().isa;
  for (const std::string& name : names) {
    if (kernels_for(name) != nullptr) {
      EXPECT_EQ(name, best);
      break;
    }
  }
  set_kernel_isa("scalar");
  EXPECT_STREQ(kernels().isa, "scalar");
  set_kernel_isa(best);
  EXPECT_EQ(kernels().isa, best);
  for (const std::string& name : names) {
    if (kernels_for(name) == nullptr) {
      EXPECT_THROW(set_kernel_isa(name), Error);
    } else {
      EXPECT_EQ(kernels_for(name)->isa, name);
    }
  }
}

// scripts/qemu-kernel-tests.sh names the variant each qemu CPU model must get by default
// (e.g. neon_dotprod, not neon_i8mm, on neoverse-n1, which has no i8mm): the features are read
// right and the priorities order them.
TEST(KernelDispatch, DefaultIsTheVariantTheCpuModelCallsFor) {
  const char* expected = std::getenv("PAGODA_EXPECTED_ISA");
  if (expected == nullptr) GTEST_SKIP() << "PAGODA_EXPECTED_ISA is not set";
  EXPECT_STREQ(kernels().isa, expected) << cpu_features().describe();
}

#if defined(__aarch64__)
// The sve variant runs exactly where SVE's vector is longer than NEON's 128 bits
// (arm/variants.cpp), with or without NEON's dot product; qemu-kernel-tests.sh runs this at
// 128 bits (max), 256 (max) and 512 (a64fx, no asimddp).
TEST(KernelDispatch, SveOnlyWithVectorsAbove128Bits) {
  const CpuFeatures& cpu = cpu_features();
  const bool wide_sve = cpu.asimd && cpu.sve && cpu.sve_vector_bytes > 16;
  EXPECT_EQ(kernels_for("sve") != nullptr, wide_sve) << cpu.describe();
}
#endif

// No variant leaves an entry empty or to the scalar reference (issue 23: nothing falls back to
// scalar on a Kunpeng 920; qemu-kernel-tests.sh runs this on each CPU model, neoverse-n1 for
// neon_dotprod). Code inside a variant's entry is checked by reading it: docs/kernels.md.
TEST(KernelDispatch, NoVariantEntryIsTheScalarOne) {
  const KernelTable& ref = *kernels_for("scalar");
  for (const std::string& name : kernel_isa_names()) {
    const KernelTable* t = kernels_for(name);
    if (t == nullptr || name == "scalar") continue;
    const std::pair<const char*, bool> entries[] = {
        {"matmul", t->matmul != nullptr && t->matmul != ref.matmul},
        {"rms_norm", t->rms_norm != nullptr && t->rms_norm != ref.rms_norm},
        {"add_rms_norm", t->add_rms_norm != nullptr && t->add_rms_norm != ref.add_rms_norm},
        {"silu_mul", t->silu_mul != nullptr && t->silu_mul != ref.silu_mul},
        {"softmax", t->softmax != nullptr && t->softmax != ref.softmax},
        {"dot", t->dot != nullptr && t->dot != ref.dot},
        {"axpy", t->axpy != nullptr && t->axpy != ref.axpy},
        {"dot_rows", t->dot_rows != nullptr && t->dot_rows != ref.dot_rows},
        {"axpy_rows", t->axpy_rows != nullptr && t->axpy_rows != ref.axpy_rows},
        {"attention_scores",
         t->attention_scores != nullptr && t->attention_scores != ref.attention_scores},
        {"attention_values",
         t->attention_values != nullptr && t->attention_values != ref.attention_values},
        {"rope", t->rope != nullptr && t->rope != ref.rope},
        {"to_f32", t->to_f32 != nullptr && t->to_f32 != ref.to_f32},
        {"from_f32", t->from_f32 != nullptr && t->from_f32 != ref.from_f32},
        {"dequantize_row", t->dequantize_row != nullptr && t->dequantize_row != ref.dequantize_row},
        {"exp_shifted", t->exp_shifted != nullptr && t->exp_shifted != ref.exp_shifted},
    };
    for (const auto& [entry, own] : entries) EXPECT_TRUE(own) << name << "." << entry;
  }
}

#if defined(__x86_64__)
// The bf16 kernel on vdpbf16ps with its two AVX512_BF16 instructions emulated in AVX-512F
// (avx512_table_emulating_bf16_dot), so that a CPU without them still checks the kernel's tiles,
// tails and rounding of x against the scalar reference. Where the CPU has the instructions, the
// emulation must give their bits.
class EmulatedBf16Dot : public ::testing::Test {
 protected:
  void SetUp() override {
    if (kernels_for("avx512") == nullptr) GTEST_SKIP() << "this CPU cannot run avx512";
  }
  static const KernelTable& emulated() { return detail::avx512_table_emulating_bf16_dot(); }
  std::mt19937 rng_{4321};
};

constexpr DType kBf16Only[] = {DType::kBF16};

TEST_F(EmulatedBf16Dot, MatmulMatchesScalar) {
  ASSERT_TRUE(emulated().matmul_bf16_activations);
  expect_matmul_matches_scalar(emulated(), kBf16Only, rng_);
  expect_matmul_large_decode_shape_matches_scalar(emulated(), kBf16Only, rng_);
}

TEST_F(EmulatedBf16Dot, MatmulIsBatchInvariant) {
  expect_matmul_batch_invariant(emulated(), kBf16Only, rng_);
}

TEST_F(EmulatedBf16Dot, MatmulOuterTokenBlocksAreBatchInvariant) {
  expect_matmul_outer_blocks_batch_invariant(emulated(), kBf16Only, rng_);
}

// Identity weights make y the bf16 rounding of x itself: round to nearest even for normal
// values, ties included (as the scalar f32_to_bf16), and zero for denormals.
TEST_F(EmulatedBf16Dot, MatmulResultsIndependentOfNeighbouringTokensAndRows) {
  expect_matmul_results_independent_of_neighbours(emulated(), kBf16Only, rng_);
}

TEST_F(EmulatedBf16Dot, MatmulBf16WorstCaseRoundingWithinBound) {
  expect_matmul_bf16_worst_case_rounding_within_bound(emulated(), rng_);
}

TEST_F(EmulatedBf16Dot, RoundsXToNearestEvenAndFlushesDenormals) {
  constexpr int64_t kCols = 64;
  std::vector<float> x;
  for (uint32_t bits : narrowing_cases(rng_)) {
    float f;
    std::memcpy(&f, &bits, sizeof f);
    // Infinite once rounded (max float rounds up) would make 0 * inf elsewhere in the row.
    if (std::isfinite(bf16_to_f32(f32_to_bf16(f)))) x.push_back(f);
  }
  x.resize(x.size() / kCols * kCols);
  const int64_t num_tokens = static_cast<int64_t>(x.size()) / kCols;
  std::vector<uint16_t> identity(kCols * kCols, f32_to_bf16(0.0f));
  for (int64_t r = 0; r < kCols; ++r) identity[r * kCols + r] = f32_to_bf16(1.0f);
  std::vector<float> y(x.size());
  emulated().matmul(x.data(), num_tokens, WeightView{identity.data(), DType::kBF16, kCols, kCols},
                    0, kCols, y.data(), kCols);
  for (size_t i = 0; i < x.size(); ++i) {
    const float expected =
        std::fpclassify(x[i]) == FP_SUBNORMAL ? 0.0f : bf16_to_f32(f32_to_bf16(x[i]));
    ASSERT_EQ(y[i], expected) << "x = " << x[i];
  }
}

TEST_F(EmulatedBf16Dot, GivesTheBitsOfTheInstructions) {
  if (!cpu_features().avx512_bf16) {
    GTEST_SKIP() << "this CPU has no AVX512_BF16; the emulation is compared with the "
                    "instructions on CPUs that have them";
  }
  const KernelTable& hardware = detail::avx512_table(true, false);
  // Values over the whole exponent range, denormals and zeros included, so that sums underflow
  // and denormal inputs and results occur; no infinities or NaNs, whose payloads the two may
  // carry differently.
  std::uniform_int_distribution<uint32_t> any;
  const auto finite = [&] {
    for (;;) {
      const uint32_t bits = any(rng_);
      if ((bits & 0x7f800000u) != 0x7f800000u) return bits;
    }
  };
  for (int64_t cols : {31, 64, 257}) {
    const int64_t rows = 13, num_tokens = 7;
    std::vector<uint16_t> w(rows * cols);
    for (uint16_t& v : w) v = static_cast<uint16_t>(finite() >> 16);
    std::vector<float> x(num_tokens * cols);
    for (float& v : x) {
      // Exponents near the bottom most of the time, so that products land among denormals.
      const uint32_t bits = (finite() & 0x80ffffffu) | ((any(rng_) % 40) << 23);
      std::memcpy(&v, &bits, sizeof v);
    }
    std::vector<float> expected(num_tokens * rows), actual(num_tokens * rows);
    hardware.matmul(x.data(), num_tokens, WeightView{w.data(), DType::kBF16, rows, cols}, 0, rows,
                    expected.data(), rows);
    emulated().matmul(x.data(), num_tokens, WeightView{w.data(), DType::kBF16, rows, cols}, 0, rows,
                      actual.data(), rows);
    ASSERT_EQ(std::memcmp(actual.data(), expected.data(), actual.size() * sizeof(float)), 0)
        << "cols=" << cols;
  }
}
#endif

}  // namespace
}  // namespace pagoda
