// Cutting a row-parallel shard's columns out of every weight format (model/weights.h
// slice_columns): each shard row dequantizes to the same values as those columns of the whole
// row, and cuts that would split a quantization group or a run of 32 are refused.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/quantize.h"
#include "model/weights.h"
#include "pagoda/error.h"

namespace pagoda {
namespace {

constexpr int64_t kRows = 3, kCols = 128;

std::vector<float> random_matrix() {
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> m(kRows * kCols);
  for (float& v : m) v = dist(rng);
  return m;
}

WeightView f32_view(const std::vector<float>& m) {
  WeightView w;
  w.data = m.data();
  w.dtype = DType::kF32;
  w.rows = kRows;
  w.cols = kCols;
  return w;
}

// Every row of the shard against the same columns of the whole matrix, dequantized.
void expect_same_columns(const WeightView& whole, const WeightView& shard, int64_t first) {
  std::vector<float> a(kCols), b(static_cast<size_t>(shard.cols));
  for (int64_t r = 0; r < kRows; ++r) {
    dequantize_row_reference(whole, r, a.data());
    dequantize_row_reference(shard, r, b.data());
    for (int64_t c = 0; c < shard.cols; ++c) ASSERT_EQ(b[c], a[first + c]) << r << "," << c;
  }
}

TEST(WeightShard, FloatColumnsAnywhere) {
  const std::vector<float> m = random_matrix();
  std::vector<std::shared_ptr<const void>> owned;
  const WeightView shard = slice_columns(f32_view(m), 40, 24, "w", owned);
  EXPECT_EQ(shard.cols, 24);
  expect_same_columns(f32_view(m), shard, 40);
}

TEST(WeightShard, WholeGroupsOfInt4AndInt8) {
  const std::vector<float> m = random_matrix();
  for (DType to : {DType::kI4, DType::kI8}) {
    const QuantizedMatrix q = quantize_matrix(f32_view(m), to, 32);
    for (int64_t first : {0, 32, 64, 96}) {
      std::vector<std::shared_ptr<const void>> owned;
      const WeightView shard = slice_columns(q.view, first, 32, "w", owned);
      EXPECT_EQ(shard.group_size, 32);
      expect_same_columns(q.view, shard, first);
    }
  }
}

TEST(WeightShard, PartOfAPerChannelGroupKeepsItsScale) {
  const std::vector<float> m = random_matrix();
  const QuantizedMatrix q = quantize_matrix(f32_view(m), DType::kI8, kCols);  // per channel
  std::vector<std::shared_ptr<const void>> owned;
  const WeightView shard = slice_columns(q.view, 64, 64, "w", owned);
  EXPECT_EQ(shard.group_size, 64);
  expect_same_columns(q.view, shard, 64);
}

TEST(WeightShard, CutsThroughGroupsAreRefused) {
  const std::vector<float> m = random_matrix();
  const QuantizedMatrix q = quantize_matrix(f32_view(m), DType::kI4, 64);
  std::vector<std::shared_ptr<const void>> owned;
  // 96 columns are one and a half groups of 64; 16 columns split a run of 32.
  EXPECT_THROW(slice_columns(q.view, 0, 96, "w", owned), Error);
  EXPECT_THROW(slice_columns(q.view, 0, 16, "w", owned), Error);
  EXPECT_THROW(slice_columns(q.view, 96, 64, "w", owned), Error);
}

}  // namespace
}  // namespace pagoda
