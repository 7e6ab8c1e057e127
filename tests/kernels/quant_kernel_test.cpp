// The quantized matmul (kI8 / kI4 weights) and dequantize_row of every kernel table this CPU
// can run, against the scalar table; the scalar table against plain definitions:
//  - weight-only: scalar == fp32 matmul on dequantize_row_reference's rows (bit for bit);
//  - W8A8 / W4A8: scalar within the activation-quantization error of that fp32 result;
//  - each ISA == scalar up to float summation order, every group size (32, 64, 128, cols),
//    odd row ranges, 1..40 tokens, raw layouts with extreme values (int8 -128, all nibbles,
//    all-zero activation blocks), the largest integer sums (no int16 saturation, no int32
//    wrap); bit-exact batch invariance and thread splits.
#include <omp.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <ostream>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/kernels.h"
#include "kernels/lane_panels.h"
#include "kernels/ops.h"
#include "kernels/quantize.h"
#include "kernels/tables.h"
#include "util/cpu_features.h"
#include "util/error.h"
#include "util/half.h"

namespace pagoda {
namespace {

constexpr double kUnitRoundoff = 5.9604644775390625e-8;  // 2^-24

std::vector<float> random_floats(std::mt19937& rng, int64_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = dist(rng);
  return v;
}

// A quantized weight in Pagoda's layout with raw random contents: every int8 value including
// -128, every nibble, scales and mins of both signs. Owns its bytes.
struct QuantWeights {
  std::vector<uint8_t> values;
  std::vector<uint16_t> scales, mins;
  WeightView view;
};

QuantWeights random_quant_weights(std::mt19937& rng, DType dtype, int64_t rows, int64_t cols,
                                  int64_t group_size) {
  QuantWeights w;
  w.values.resize(static_cast<size_t>(dtype_row_bytes(dtype, cols) * rows));
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& b : w.values) b = static_cast<uint8_t>(byte(rng));
  const int64_t num_scales = rows * (cols / group_size);
  for (float s : random_floats(rng, num_scales, 0.001f, 0.02f)) w.scales.push_back(f32_to_f16(s));
  if (dtype == DType::kI4) {
    for (float m : random_floats(rng, num_scales, -0.15f, 0.05f)) w.mins.push_back(f32_to_f16(m));
  }
  w.view.data = w.values.data();
  w.view.dtype = dtype;
  w.view.rows = rows;
  w.view.cols = cols;
  w.view.scales = w.scales.data();
  w.view.mins = dtype == DType::kI4 ? w.mins.data() : nullptr;
  w.view.group_size = group_size;
  return w;
}

// Q4_0-style: every min exactly -8 * its scale, flagged so (the W4A8 kernels then keep the -8
// inside the integer sums and must not read the mins plane).
void make_symmetric(QuantWeights& w) {
  for (size_t i = 0; i < w.mins.size(); ++i)
    w.mins[i] = f32_to_f16(-8.0f * f16_to_f32(w.scales[i]));
  w.view.symmetric_int4 = true;
}

// The weight kinds the matmul tests run: int8, int4 with zero points, symmetric int4.
struct WeightKind {
  DType dtype;
  bool symmetric;
  const char* name;
};
const WeightKind kWeightKinds[] = {
    {DType::kI8, false, "i8"}, {DType::kI4, false, "i4"}, {DType::kI4, true, "i4 symmetric"}};

QuantWeights random_weights_of_kind(std::mt19937& rng, const WeightKind& kind, int64_t rows,
                                    int64_t cols, int64_t group_size) {
  QuantWeights w = random_quant_weights(rng, kind.dtype, rows, cols, group_size);
  if (kind.symmetric) make_symmetric(w);
  return w;
}

std::vector<float> dequantized(const WeightView& w) {
  std::vector<float> out(static_cast<size_t>(w.rows * w.cols));
  for (int64_t r = 0; r < w.rows; ++r) dequantize_row_reference(w, r, out.data() + r * w.cols);
  return out;
}

// Activations with the awkward cases the W8A8 quantizer must handle: one all-zero block per
// token and a few large values (one block's absmax far above the rest).
std::vector<float> activations(std::mt19937& rng, int64_t num_tokens, int64_t cols) {
  std::vector<float> x = random_floats(rng, num_tokens * cols);
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int64_t zero_block = t % (cols / 32);
    for (int64_t i = 0; i < 32; ++i) x[t * cols + zero_block * 32 + i] = 0.0f;
    x[t * cols + (t * 7 + 5) % cols] = 30.0f;
  }
  return x;
}

// Per output element, Σ_c |x_c| |w_c| (w dequantized): error bounds scale with it.
std::vector<double> magnitudes(const std::vector<float>& x, int64_t num_tokens,
                               const std::vector<float>& w, int64_t rows, int64_t cols) {
  std::vector<double> m(static_cast<size_t>(num_tokens * rows));
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0.0;
      for (int64_t c = 0; c < cols; ++c) s += std::fabs(x[t * cols + c] * w[r * cols + c]);
      m[t * rows + r] = s;
    }
  }
  return m;
}

// A table under test: every ISA this CPU runs, and on AVX-512 CPUs both the VNNI and the
// vpmaddubsw variants of the integer matmul.
struct TableCase {
  std::string name;
  std::function<const KernelTable*()> get;
};

void PrintTo(const TableCase& c, std::ostream* os) {
  *os << c.name;
}

std::vector<TableCase> table_cases() {
  std::vector<TableCase> cases;
  for (const std::string& name : kernel_isa_names()) {
    cases.push_back({name, [name] { return kernels_for(name); }});
  }
#if defined(__x86_64__)
  cases.push_back({"avx512_no_vnni", []() -> const KernelTable* {
                     return kernels_for("avx512") ? &detail::avx512_table(false, false) : nullptr;
                   }});
  cases.push_back({"avx512_vnni", []() -> const KernelTable* {
                     return kernels_for("avx512") && cpu_features().avx512_vnni
                                ? &detail::avx512_table(false, true)
                                : nullptr;
                   }});
#endif
  return cases;
}

class QuantKernelTest : public ::testing::TestWithParam<TableCase> {
 protected:
  void SetUp() override {
    table_ = GetParam().get();
    if (table_ == nullptr) GTEST_SKIP() << "this CPU cannot run " << GetParam().name;
  }
  const KernelTable& scalar() const { return *kernels_for("scalar"); }

  // For each weight kind this table reads lane panels of, over kLayouts with 37 rows (a last
  // panel of 1 or 5 rows): the kind packed as the table reads it must give, on this table,
  // `reference`'s bits on the row-major weights, for each token count and row range (ranges
  // that start and end inside a panel; the 2048-wide layout only up to 5 tokens and at 33).
  // Counts the kinds checked in num_kinds.
  void expect_lane_panels_give(const KernelTable& reference, std::span<const int64_t> token_counts,
                               std::initializer_list<std::pair<int64_t, int64_t>> ranges,
                               int& num_kinds);

  const KernelTable* table_ = nullptr;
  std::mt19937 rng_{4321};
};

struct Layout {
  int64_t cols, group_size;
};
// Every group size the layout allows that matters: the smallest, two powers of two, a
// multiple of 32 that is not a power of two (96), and one group per row; 224 = 7 blocks of 32,
// an odd count (the last block of a pair-wise tile goes alone); 1312 = 41 groups, which the
// decode tiles' scale transposes take as 32 + 8 + 1.
const Layout kLayouts[] = {{128, 32}, {224, 32},  {256, 64},    {384, 128},
                           {192, 96}, {160, 160}, {2048, 2048}, {1312, 32}};
// The lane panel layouts the tables read (kernels/lane_panels.h): x86 vpmaddwd (int8 only),
// AArch64 sdot by element, smmla.
const LanePanelLayout kPanelLayouts[] = {{16, 2}, {4, 4}, {4, 8}};
const int64_t kTokenCounts[] = {1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 13, 17, 24, 33, 40};

TEST_P(QuantKernelTest, MatmulMatchesScalar) {
  const int64_t kRows = 37, kLdy = kRows + 3;
  const int64_t row_begin = 3, row_end = 36;  // unaligned, like a thread's share
  for (const WeightKind& kind : kWeightKinds) {
    for (const Layout& layout : kLayouts) {
      QuantWeights w = random_weights_of_kind(rng_, kind, kRows, layout.cols, layout.group_size);
      const std::vector<float> wf = dequantized(w.view);
      for (bool int8_activations : {false, true}) {
        w.view.int8_activations = int8_activations;
        for (int64_t num_tokens : kTokenCounts) {
          if (layout.cols == 2048 && num_tokens > 5 && num_tokens != 33) continue;  // time
          const std::vector<float> x = activations(rng_, num_tokens, layout.cols);
          const std::vector<double> mag = magnitudes(x, num_tokens, wf, kRows, layout.cols);
          std::vector<float> expected(num_tokens * kLdy, -7.0f), actual(num_tokens * kLdy, -7.0f);
          scalar().matmul(x.data(), num_tokens, w.view, row_begin, row_end, expected.data(), kLdy);
          table_->matmul(x.data(), num_tokens, w.view, row_begin, row_end, actual.data(), kLdy);
          // Weight-only: the same fp32 weights, so only the summation order differs: 2 n u.
          // W8A8: the same integers; fp32 sums of num_blocks + num_groups + 8 terms (the SIMD
          // lanes) in another order, each term within |x||w| of the total: 2 (n_terms) u, with
          // room for the per-block products d * scale (a few more roundings per term).
          const double n_terms =
              int8_activations
                  ? static_cast<double>(layout.cols / 32 + layout.cols / layout.group_size + 8)
                  : static_cast<double>(layout.cols);
          const double rel = (int8_activations ? 8.0 : 2.0) * n_terms * kUnitRoundoff;
          for (int64_t t = 0; t < num_tokens; ++t) {
            for (int64_t r = 0; r < kLdy; ++r) {
              const float e = expected[t * kLdy + r], a = actual[t * kLdy + r];
              if (r < row_begin || r >= row_end) {
                ASSERT_EQ(a, -7.0f) << "wrote outside the row range at r=" << r;
                continue;
              }
              // The activation error adds at most ~Σ|w| d/2 ~ mag / 127 to W8A8 sums, so the
              // magnitude bound holds for them too, with 2x slack.
              const double tol = rel * 2.0 * mag[t * kRows + r] + 1e-6;
              ASSERT_NEAR(a, e, tol) << GetParam().name << " " << kind.name
                                     << (int8_activations ? " W8A8" : " weight-only")
                                     << " cols=" << layout.cols << " group=" << layout.group_size
                                     << " tokens=" << num_tokens << " t=" << t << " r=" << r;
            }
          }
        }
      }
    }
  }
}

TEST_P(QuantKernelTest, MatmulIsBatchInvariant) {
  // Token t alone == token t inside batches of every size, bit for bit, in both modes (every
  // path adds the same terms in the same order, see quant_kernels.h).
  // 57 rows: one whole 32-row pair of panels, then a pair whose second panel has 9 rows.
  const int64_t kRows = 57, kCols = 256, kTokens = 40;
  for (const WeightKind& kind : kWeightKinds) {
    for (int64_t group_size : {int64_t{32}, kCols}) {
      QuantWeights w = random_weights_of_kind(rng_, kind, kRows, kCols, group_size);
      for (bool int8_activations : {false, true}) {
        w.view.int8_activations = int8_activations;
        const std::vector<float> x = activations(rng_, kTokens, kCols);
        std::vector<float> batch(kTokens * kRows);
        table_->matmul(x.data(), kTokens, w.view, 0, kRows, batch.data(), kRows);
        for (int64_t count : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{9}, int64_t{17}}) {
          for (int64_t t0 = 0; t0 + count <= kTokens; t0 += 11) {
            std::vector<float> part(count * kRows);
            table_->matmul(x.data() + t0 * kCols, count, w.view, 0, kRows, part.data(), kRows);
            for (int64_t i = 0; i < count * kRows; ++i) {
              ASSERT_EQ(part[i], batch[t0 * kRows + i])
                  << kind.name << (int8_activations ? " W8A8" : " weight-only")
                  << " group=" << group_size << " count=" << count << " t0=" << t0;
            }
          }
        }
      }
    }
  }
}

TEST_P(QuantKernelTest, ManyRowsAreManyMatvecsAtModelShapes) {
  // Speculative decoding verifies drafts with a matmul of several tokens, where the draft and
  // plain decoding run one token at a time (the decode tiles); panels and lane panels take
  // over from 4 and 10 tokens. Each token's outputs must be the matvec's bits, at
  // DeepSeek-Coder-1.3B's widths (2048, 5504 = 43 x 128) in groups of 32, 128 and per channel,
  // over a row range that starts off a panel boundary (a thread's share).
  const int64_t kRows = 70, row_begin = 16, row_end = 70;
  for (const WeightKind& kind : kWeightKinds) {
    for (int64_t cols : {int64_t{2048}, int64_t{5504}}) {
      for (int64_t group_size : {int64_t{32}, int64_t{128}, cols}) {
        QuantWeights w = random_weights_of_kind(rng_, kind, kRows, cols, group_size);
        for (bool int8_activations : {false, true}) {
          w.view.int8_activations = int8_activations;
          for (int64_t count : {2, 5, 12}) {
            const std::vector<float> x = activations(rng_, count, cols);
            std::vector<float> batch(count * kRows, -7.0f);
            table_->matmul(x.data(), count, w.view, row_begin, row_end, batch.data(), kRows);
            for (int64_t t = 0; t < count; ++t) {
              std::vector<float> one(kRows, -7.0f);
              table_->matmul(x.data() + t * cols, 1, w.view, row_begin, row_end, one.data(), kRows);
              for (int64_t r = row_begin; r < row_end; ++r) {
                ASSERT_EQ(one[r], batch[t * kRows + r])
                    << kind.name << (int8_activations ? " W8A8" : " weight-only") << " cols "
                    << cols << " group " << group_size << " tokens " << count << " token " << t
                    << " row " << r;
              }
            }
          }
        }
      }
    }
  }
}

#if defined(__aarch64__)
// The AArch64 W8A8 / W4A8 tiles (arm/int8_kernels.h) add the scalar table's terms in the
// scalar table's order (4 rows in the lanes, multiplies and adds unfused), so they must give
// its bits exactly, on every layout and token count (the x86 tiles reorder: tolerance above).
TEST_P(QuantKernelTest, Aarch64Int8ActivationsAreTheScalarBits) {
  if (GetParam().name == "scalar") GTEST_SKIP() << "the reference itself";
  const int64_t kRows = 37;
  for (const WeightKind& kind : kWeightKinds) {
    for (const Layout& layout : kLayouts) {
      QuantWeights w = random_weights_of_kind(rng_, kind, kRows, layout.cols, layout.group_size);
      w.view.int8_activations = true;
      for (int64_t num_tokens : {int64_t{1}, int64_t{3}, int64_t{4}, int64_t{9}}) {
        const std::vector<float> x = activations(rng_, num_tokens, layout.cols);
        std::vector<float> expected(num_tokens * kRows), actual(num_tokens * kRows);
        scalar().matmul(x.data(), num_tokens, w.view, 0, kRows, expected.data(), kRows);
        table_->matmul(x.data(), num_tokens, w.view, 0, kRows, actual.data(), kRows);
        for (int64_t i = 0; i < num_tokens * kRows; ++i) {
          ASSERT_EQ(actual[i], expected[i])
              << GetParam().name << " " << kind.name << " cols=" << layout.cols
              << " group=" << layout.group_size << " tokens=" << num_tokens << " i=" << i;
        }
      }
    }
  }
}

// The AArch64 tiles on lane panels packed at load (arm/int8_panels.h: sdot by element on 4 x 4
// panels, smmla on 4 x 8; int4 in the same layouts two values a byte, arm/int4_panels.h) finish
// every block as the row-major tiles do, so they too must give the scalar table's bits: int8,
// int4 with zero points and symmetric int4, every group size (32 is Q8_0 / Q4_0 / Q4_K, 128
// GPTQ's, cols per channel), decode and prefill token counts (odd ones: a pair's second token
// repeated), 37 rows (a last panel of one row) and ranges that start and end inside a panel.
TEST_P(QuantKernelTest, Aarch64LanePanelsAreTheScalarBits) {
  const int64_t token_counts[] = {1, 2, 3, 4, 5, 8, 9, 17};
  int num_kinds = 0;
  expect_lane_panels_give(scalar(), token_counts, {{0, 37}, {3, 36}, {5, 6}}, num_kinds);
  if (num_kinds == 0) GTEST_SKIP() << GetParam().name << " reads no lane panels";
}
#endif

TEST_P(QuantKernelTest, ExtremeIntegerSumsDoNotOverflow) {
  // The largest integer sums the layouts allow, through every path (decode tiles below 4
  // tokens, 4-row tiles, and the lane panels from 10 tokens on without VNNI): int8 weights all
  // -128 against activations that quantize to -127 (vpmaddubsw pair sums 2 * 128 * 127 just
  // under 2^15; long rows summed in int32), and int4 nibbles all 15 (int16 sums of 16 products
  // 16 * 15 * 127 = 30480 in the 4-row tiles). A saturated int16 sum would be off by >= 0.7%,
  // a wrapped one by far more; float summation order by ~n_terms * u (tolerance 10^-4).
  const int64_t kRows = 19, kCols = 4096;
  for (const WeightKind& kind : kWeightKinds) {
    for (int64_t group_size : {int64_t{32}, kCols}) {
      QuantWeights w = random_weights_of_kind(rng_, kind, kRows, kCols, group_size);
      std::fill(w.values.begin(), w.values.end(), kind.dtype == DType::kI8 ? 0x80 : 0xff);
      w.view.int8_activations = true;
      for (int64_t num_tokens : {int64_t{1}, int64_t{5}, int64_t{13}}) {
        std::vector<float> x(static_cast<size_t>(num_tokens * kCols), -0.5f);
        std::vector<float> expected(num_tokens * kRows), actual(num_tokens * kRows);
        scalar().matmul(x.data(), num_tokens, w.view, 0, kRows, expected.data(), kRows);
        table_->matmul(x.data(), num_tokens, w.view, 0, kRows, actual.data(), kRows);
        for (size_t i = 0; i < expected.size(); ++i) {
          ASSERT_NEAR(actual[i], expected[i], 1e-4 * std::fabs(expected[i]) + 1e-6)
              << GetParam().name << " " << kind.name << " group " << group_size << " tokens "
              << num_tokens << " i " << i;
        }
      }
    }
  }
}

TEST_P(QuantKernelTest, SymmetricInt4NeverReadsTheMins) {
  // Q4_0-style weights flagged symmetric_int4: the W4A8 paths keep the -8 in the integer sums
  // (MatmulMatchesScalar checks the values). Poisoning the mins plane (NaN) must change no bit.
  const int64_t kRows = 37, kLdy = kRows;
  for (const Layout& layout : kLayouts) {
    QuantWeights w = random_quant_weights(rng_, DType::kI4, kRows, layout.cols, layout.group_size);
    make_symmetric(w);
    w.view.int8_activations = true;
    ASSERT_TRUE(symmetric_int4_mins(w.view));
    const std::vector<uint16_t> poison(w.mins.size(), 0x7e00);  // fp16 NaN
    WeightView poisoned = w.view;
    poisoned.mins = poison.data();
    for (int64_t num_tokens : {1, 2, 3, 4, 5, 9, 17, 40}) {
      if (layout.cols == 2048 && num_tokens > 5) continue;  // time
      const std::vector<float> x = activations(rng_, num_tokens, layout.cols);
      std::vector<float> expected(num_tokens * kLdy), actual(num_tokens * kLdy);
      table_->matmul(x.data(), num_tokens, w.view, 0, kRows, expected.data(), kLdy);
      table_->matmul(x.data(), num_tokens, poisoned, 0, kRows, actual.data(), kLdy);
      for (size_t i = 0; i < actual.size(); ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(actual[i]), std::bit_cast<uint32_t>(expected[i]))
            << GetParam().name << " cols=" << layout.cols << " group=" << layout.group_size
            << " tokens=" << num_tokens << " i=" << i;
      }
    }
  }
}

TEST_P(QuantKernelTest, DequantizeRowMatchesReferenceExactly) {
  for (DType dtype : {DType::kI8, DType::kI4}) {
    for (const Layout& layout : kLayouts) {
      const QuantWeights w = random_quant_weights(rng_, dtype, 5, layout.cols, layout.group_size);
      std::vector<float> expected(layout.cols), actual(layout.cols);
      for (int64_t r = 0; r < 5; ++r) {
        dequantize_row_reference(w.view, r, expected.data());
        table_->dequantize_row(w.view, r, actual.data());
        ASSERT_EQ(actual, expected) << dtype_name(dtype) << " group=" << layout.group_size;
      }
    }
  }
  // Float tables go through the same entry (embedding lookup of any table).
  const std::vector<float> f = random_floats(rng_, 3 * 37);
  std::vector<uint16_t> h(f.size());
  for (size_t i = 0; i < f.size(); ++i) h[i] = f32_to_bf16(f[i]);
  const WeightView bf16{h.data(), DType::kBF16, 3, 37};
  std::vector<float> expected(37), actual(37);
  dequantize_row_reference(bf16, 2, expected.data());
  table_->dequantize_row(bf16, 2, actual.data());
  EXPECT_EQ(actual, expected);
}

// Panels packed at load (kernels/lane_panels.h) on the tables that read them, int8 and int4
// (with zero points and symmetric): the bits of the row-major weights on the same table, for
// every token count (decode included, which otherwise runs other tiles), every group size,
// ranges that start and end inside a panel and a last panel of 5 rows, with the row-major
// values, scales and mins gone from the view (a symmetric panel has no mins plane).
void QuantKernelTest::expect_lane_panels_give(
    const KernelTable& reference, std::span<const int64_t> token_counts,
    std::initializer_list<std::pair<int64_t, int64_t>> ranges, int& num_kinds) {
  const int64_t kRows = 37, kLdy = kRows + 2;
  for (const WeightKind& kind : kWeightKinds) {
    const LanePanelLayout panel_layout = table_->lane_panel_layout(kind.dtype);
    if (!panel_layout) continue;
    ++num_kinds;
    for (const Layout& layout : kLayouts) {
      QuantWeights w = random_weights_of_kind(rng_, kind, kRows, layout.cols, layout.group_size);
      w.view.int8_activations = true;
      const LanePanels panels = pack_lane_panels(w.view, panel_layout);
      const int64_t planes = kind.dtype == DType::kI4 && !kind.symmetric ? 2 : 1;
      ASSERT_EQ(panels.size_bytes,
                num_lane_panels(kRows, panel_layout) *
                    (panel_layout.rows * dtype_row_bytes(kind.dtype, layout.cols) +
                     panel_layout.rows * (layout.cols / layout.group_size) * 2 * planes));
      const WeightView packed = with_lane_panels(w.view, panels.bytes.get(), panel_layout);
      ASSERT_EQ(packed.data, nullptr);
      ASSERT_EQ(packed.scales, nullptr);
      ASSERT_EQ(packed.mins, nullptr);
      for (int64_t num_tokens : token_counts) {
        if (layout.cols == 2048 && num_tokens > 5 && num_tokens != 33) continue;  // time
        const std::vector<float> x = activations(rng_, num_tokens, layout.cols);
        for (auto [row_begin, row_end] : ranges) {
          std::vector<float> expected(num_tokens * kLdy, -7.0f), actual(num_tokens * kLdy, -7.0f);
          reference.matmul(x.data(), num_tokens, w.view, row_begin, row_end, expected.data(), kLdy);
          table_->matmul(x.data(), num_tokens, packed, row_begin, row_end, actual.data(), kLdy);
          for (int64_t i = 0; i < num_tokens * kLdy; ++i) {
            ASSERT_EQ(std::bit_cast<uint32_t>(actual[i]), std::bit_cast<uint32_t>(expected[i]))
                << GetParam().name << " " << kind.name << " cols=" << layout.cols
                << " group=" << layout.group_size << " tokens=" << num_tokens << " rows ["
                << row_begin << ", " << row_end << ") t=" << i / kLdy << " r=" << i % kLdy;
          }
        }
      }
    }
  }
}

TEST_P(QuantKernelTest, LanePanelsPackedAtLoadGiveTheRowMajorBits) {
  int num_kinds = 0;
  expect_lane_panels_give(*table_, kTokenCounts, {{0, 37}, {3, 36}, {16, 21}}, num_kinds);
  if (num_kinds == 0) GTEST_SKIP() << GetParam().name << " reads no lane panels";
}

// Every table's dequantize_row reads packed panels of every layout and both dtypes (a packed
// matrix's row outside matmul).
TEST_P(QuantKernelTest, DequantizeRowReadsLanePanels) {
  for (const WeightKind& kind : kWeightKinds) {
    for (const LanePanelLayout panel_layout : kPanelLayouts) {
      for (const Layout& layout : kLayouts) {
        const QuantWeights w =
            random_weights_of_kind(rng_, kind, 21, layout.cols, layout.group_size);
        const LanePanels panels = pack_lane_panels(w.view, panel_layout);
        const WeightView packed = with_lane_panels(w.view, panels.bytes.get(), panel_layout);
        std::vector<float> expected(layout.cols), actual(layout.cols), reference(layout.cols);
        for (int64_t r = 0; r < 21; ++r) {
          dequantize_row_reference(w.view, r, expected.data());
          table_->dequantize_row(packed, r, actual.data());
          dequantize_row_reference(packed, r, reference.data());
          ASSERT_EQ(actual, expected)
              << kind.name << " " << panel_layout.rows << " x " << panel_layout.row_bytes
              << " group=" << layout.group_size << " r=" << r;
          ASSERT_EQ(reference, expected)
              << kind.name << " " << panel_layout.rows << " x " << panel_layout.row_bytes
              << " group=" << layout.group_size << " r=" << r;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTables, QuantKernelTest, ::testing::ValuesIn(table_cases()),
                         [](const ::testing::TestParamInfo<TableCase>& info) {
                           return info.param.name;
                         });

// ---------------------------------------------------------------------------------------------
// The scalar table against plain definitions.

// The packer refuses what its layouts cannot hold, with an error rather than wrong panels:
// groups that split a row's kept bytes, layouts whose bytes do not divide a block of 32 (int4:
// half a block, whose two halves share a byte), int4 with zero points but no mins.
TEST(LanePanelPacking, RejectsGroupsAndLayoutsThatDoNotFit) {
  std::mt19937 rng(5);
  const QuantWeights g36 = random_quant_weights(rng, DType::kI8, 5, 288, 36);
  EXPECT_NO_THROW(pack_lane_panels(g36.view, {4, 4}));
  EXPECT_THROW(pack_lane_panels(g36.view, {4, 8}), Error);
  const QuantWeights g32 = random_quant_weights(rng, DType::kI8, 5, 64, 32);
  EXPECT_THROW(pack_lane_panels(g32.view, {4, 3}), Error);
  EXPECT_THROW(pack_lane_panels(g32.view, {0, 4}), Error);
  EXPECT_NO_THROW(pack_lane_panels(g32.view, {4, 32}));
  QuantWeights i4 = random_quant_weights(rng, DType::kI4, 5, 64, 32);
  EXPECT_NO_THROW(pack_lane_panels(i4.view, {4, 4}));
  EXPECT_NO_THROW(pack_lane_panels(i4.view, {4, 16}));
  EXPECT_THROW(pack_lane_panels(i4.view, {4, 32}), Error);
  i4.view.mins = nullptr;
  EXPECT_THROW(pack_lane_panels(i4.view, {4, 4}), Error);
  i4.view.symmetric_int4 = true;  // w = scale (q - 8): no mins plane to pack
  EXPECT_NO_THROW(pack_lane_panels(i4.view, {4, 4}));
  const WeightView f32{g32.values.data(), DType::kF32, 5, 16};
  EXPECT_THROW(pack_lane_panels(f32, {4, 4}), Error);
}

// Packing and unpacking a row gives back its bytes, scales and mins exactly (symmetric int4: the
// mins it had, as -8 * scale), in every layout; int4 panels hold each byte's nibbles as q ^ 8 in
// the int8 panel's order, which the tiles rely on (arm/int4_panels.h).
TEST(LanePanelPacking, UnpackedRowsAreTheRowMajorBytes) {
  std::mt19937 rng(11);
  for (const WeightKind& kind : kWeightKinds) {
    for (const LanePanelLayout panel_layout : kPanelLayouts) {
      QuantWeights w = random_weights_of_kind(rng, kind, 9, 256, 64);
      const LanePanels panels = pack_lane_panels(w.view, panel_layout);
      const WeightView packed = with_lane_panels(w.view, panels.bytes.get(), panel_layout);
      const int64_t row_bytes = dtype_row_bytes(kind.dtype, 256);
      for (int64_t r = 0; r < 9; ++r) {
        const WeightView one = unpacked_lane_panel_row(packed, r);
        ASSERT_EQ(one.rows, 1);
        ASSERT_EQ(one.lane_panels, nullptr);
        const auto* bytes = static_cast<const uint8_t*>(one.data);
        for (int64_t i = 0; i < row_bytes; ++i) {
          ASSERT_EQ(bytes[i], w.values[r * row_bytes + i]) << kind.name << " r=" << r << " i=" << i;
        }
        for (int64_t g = 0; g < 4; ++g) {
          ASSERT_EQ(one.scales[g], w.scales[r * 4 + g]) << kind.name << " r=" << r;
          if (kind.dtype == DType::kI4) {
            ASSERT_EQ(one.mins[g], w.mins[r * 4 + g]) << kind.name << " r=" << r;
          }
        }
      }
      if (kind.dtype == DType::kI4 && panel_layout == LanePanelLayout{4, 4}) {
        // Row 1's first byte sits at row 1's first chunk of panel 0, flipped.
        const auto* bytes = reinterpret_cast<const uint8_t*>(panels.bytes.get());
        EXPECT_EQ(bytes[4], w.values[128] ^ 0x88);
        EXPECT_EQ(bytes[16], w.values[4] ^ 0x88);  // row 0's second chunk
      }
    }
  }
}

TEST(SymmetricInt4Mins, HoldsOnlyWhenEveryMinIsMinus8TimesItsScale) {
  std::mt19937 rng(3);
  QuantWeights w = random_quant_weights(rng, DType::kI4, 4, 64, 32);
  EXPECT_FALSE(symmetric_int4_mins(w.view)) << "random mins";
  for (size_t i = 0; i < w.mins.size(); ++i) {
    w.mins[i] = f32_to_f16(-8.0f * f16_to_f32(w.scales[i]));
  }
  EXPECT_TRUE(symmetric_int4_mins(w.view));
  w.scales[5] = 0;  // +0: the min must be -0 to match, not +0
  w.mins[5] = 0;
  EXPECT_FALSE(symmetric_int4_mins(w.view));
  w.mins[5] = 0x8000;
  EXPECT_TRUE(symmetric_int4_mins(w.view));
  w.mins[6] = static_cast<uint16_t>(w.mins[6] + 1);  // one ulp off
  EXPECT_FALSE(symmetric_int4_mins(w.view));
  const QuantWeights w8 = random_quant_weights(rng, DType::kI8, 4, 64, 32);
  EXPECT_FALSE(symmetric_int4_mins(w8.view));
}

TEST(ScalarQuantKernels, WeightOnlyEqualsFloatMatmulOnDequantizedRows) {
  std::mt19937 rng(7);
  const KernelTable& scalar = *kernels_for("scalar");
  for (DType dtype : {DType::kI8, DType::kI4}) {
    for (int64_t group_size : {int64_t{32}, int64_t{64}, int64_t{192}}) {
      const QuantWeights w = random_quant_weights(rng, dtype, 11, 192, group_size);
      const std::vector<float> wf = dequantized(w.view);
      const WeightView f32{wf.data(), DType::kF32, 11, 192};
      const std::vector<float> x = random_floats(rng, 3 * 192);
      std::vector<float> expected(3 * 11), actual(3 * 11);
      scalar.matmul(x.data(), 3, f32, 0, 11, expected.data(), 11);
      scalar.matmul(x.data(), 3, w.view, 0, 11, actual.data(), 11);
      EXPECT_EQ(actual, expected) << dtype_name(dtype) << " group=" << group_size;
    }
  }
}

TEST(ScalarQuantKernels, Int8ActivationsWithinQuantizationError) {
  // Rounding x to d * q (d = absmax / 127 per activation block: the weight's group for int8,
  // 32 values for int4) moves each x_c by at most d / 2, so |W8A8 - fp32| <= Σ_b d_b / 2
  // Σ_c∈b |w_c| (+ float rounding); and the bound is not vacuous: the observed error must be a
  // visible fraction of it somewhere.
  std::mt19937 rng(11);
  const KernelTable& scalar = *kernels_for("scalar");
  const int64_t kRows = 13, kCols = 256, kTokens = 3;
  double worst_ratio = 0.0;
  for (DType dtype : {DType::kI8, DType::kI4}) {
    QuantWeights w = random_quant_weights(rng, dtype, kRows, kCols, 64);
    const std::vector<float> wf = dequantized(w.view);
    const std::vector<float> x = activations(rng, kTokens, kCols);
    const WeightView f32{wf.data(), DType::kF32, kRows, kCols};
    std::vector<float> exact(kTokens * kRows), w8a8(kTokens * kRows);
    scalar.matmul(x.data(), kTokens, f32, 0, kRows, exact.data(), kRows);
    w.view.int8_activations = true;
    scalar.matmul(x.data(), kTokens, w.view, 0, kRows, w8a8.data(), kRows);
    const std::vector<double> mag = magnitudes(x, kTokens, wf, kRows, kCols);
    const int64_t block = dtype == DType::kI8 ? 64 : 32;
    for (int64_t t = 0; t < kTokens; ++t) {
      for (int64_t r = 0; r < kRows; ++r) {
        double bound = 0.0;
        for (int64_t b = 0; b < kCols / block; ++b) {
          float absmax = 0.0f;
          double sum_w = 0.0;
          for (int64_t i = 0; i < block; ++i) {
            absmax = std::fmax(absmax, std::fabs(x[t * kCols + b * block + i]));
            sum_w += std::fabs(wf[r * kCols + b * block + i]);
          }
          bound += absmax / 127.0 / 2.0 * sum_w;
        }
        const double err = std::fabs(w8a8[t * kRows + r] - exact[t * kRows + r]);
        EXPECT_LE(err, bound + 64 * kUnitRoundoff * mag[t * kRows + r])
            << dtype_name(dtype) << " t=" << t << " r=" << r;
        worst_ratio = std::fmax(worst_ratio, err / bound);
      }
    }
  }
  EXPECT_GT(worst_ratio, 0.01) << "the activations were not quantized at all";
}

TEST(ScalarQuantKernels, HandCheckedW4A8) {
  // One row of 32 values, one group: q_w = j % 16, scale 0.5, min -1 → w_j = 0.5 (j % 16) - 1.
  // x = 127 at j = 3 and -63.5 at j = 20, 0 elsewhere: d = 1, q_x = 127 and -64 (-63.5 rounds
  // to even). y = 127 * (0.5 * 3 - 1) + (-64) * (0.5 * 4 - 1) = 63.5 - 64 = -0.5.
  std::vector<uint8_t> packed(16);
  for (int j = 0; j < 16; ++j) packed[j] = static_cast<uint8_t>(j | (j << 4));
  const uint16_t scale = f32_to_f16(0.5f), min = f32_to_f16(-1.0f);
  WeightView w{packed.data(), DType::kI4, 1, 32, &scale, &min, 32, true};
  std::vector<float> x(32, 0.0f);
  x[3] = 127.0f;
  x[20] = -63.5f;
  for (const TableCase& c : table_cases()) {
    const KernelTable* table = c.get();
    if (table == nullptr) continue;
    float y = 0.0f;
    table->matmul(x.data(), 1, w, 0, 1, &y, 1);
    EXPECT_EQ(y, -0.5f) << c.name;
  }
}

TEST(ScalarQuantKernels, HandCheckedW8A8PerChannelHasOneScalePerToken) {
  // One row of 64 int8 values with one scale (per channel): the token's activations share one
  // scale, so a small value beside a large one rounds away. w_j = 0.5 (j + 1) for j < 64
  // (q_w = j + 1, scale 0.5). x = 127 at j = 2 and 0.5 at j = 40: d = 1, q_x = 127 and 0 (0.5
  // rounds to even). y = 127 * 1.5 = 190.5; blocks of 32 would have kept x_40 (q = 127, d =
  // 0.5 / 127) and given 190.5 + 0.5 * 20.5.
  std::vector<int8_t> q(64);
  for (int j = 0; j < 64; ++j) q[j] = static_cast<int8_t>(j + 1);
  const uint16_t scale = f32_to_f16(0.5f);
  WeightView w{q.data(), DType::kI8, 1, 64, &scale, nullptr, 64, true};
  std::vector<float> x(64, 0.0f);
  x[2] = 127.0f;
  x[40] = 0.5f;
  for (const TableCase& c : table_cases()) {
    const KernelTable* table = c.get();
    if (table == nullptr) continue;
    for (int64_t tokens : {int64_t{1}, int64_t{8}}) {  // the decode and the panel paths
      std::vector<float> xs, ys(static_cast<size_t>(tokens), 0.0f);
      for (int64_t t = 0; t < tokens; ++t) xs.insert(xs.end(), x.begin(), x.end());
      table->matmul(xs.data(), tokens, w, 0, 1, ys.data(), 1);
      for (float y : ys) EXPECT_EQ(y, 190.5f) << c.name << " tokens=" << tokens;
    }
  }
}

TEST(QuantOps, ThreadSplitsMatchOneCall) {
  std::mt19937 rng(3);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(3);
  for (DType dtype : {DType::kI8, DType::kI4}) {
    for (bool int8_activations : {false, true}) {
      for (int64_t tokens : {int64_t{1}, int64_t{12}, int64_t{50}}) {
        const int64_t rows = tokens == 50 ? 40 : 1000, cols = 256;  // 40 rows: token split
        QuantWeights w = random_quant_weights(rng, dtype, rows, cols, 64);
        w.view.int8_activations = int8_activations;
        const std::vector<float> x = activations(rng, tokens, cols);
        std::vector<float> expected(tokens * rows), actual(tokens * rows);
        kernels().matmul(x.data(), tokens, w.view, 0, rows, expected.data(), rows);
        ops::matmul(x.data(), tokens, w.view, actual.data());
        EXPECT_EQ(actual, expected) << dtype_name(dtype) << " tokens=" << tokens;
      }
    }
  }
  omp_set_num_threads(saved);
}

TEST(QuantOps, QuantizedMatrixFromQuantizeMatchesFloatClosely) {
  // End to end through the lead's quantizer: int8 per channel and int4 in groups of 32 stay
  // close to the float matmul (a sanity check on layout agreement, not on quantization quality).
  std::mt19937 rng(5);
  const int64_t rows = 64, cols = 512;
  const std::vector<float> wf = random_floats(rng, rows * cols);
  const WeightView f32{wf.data(), DType::kF32, rows, cols};
  const std::vector<float> x = random_floats(rng, 2 * cols);
  std::vector<float> exact(2 * rows);
  kernels().matmul(x.data(), 2, f32, 0, rows, exact.data(), rows);
  for (DType dtype : {DType::kI8, DType::kI4}) {
    QuantizedMatrix q = quantize_matrix(f32, dtype, dtype == DType::kI8 ? 0 : 32);
    for (bool int8_activations : {false, true}) {
      q.view.int8_activations = int8_activations;
      std::vector<float> y(2 * rows);
      kernels().matmul(x.data(), 2, q.view, 0, rows, y.data(), rows);
      double err = 0.0, norm = 0.0;
      for (int64_t i = 0; i < 2 * rows; ++i) {
        err += (y[i] - exact[i]) * (y[i] - exact[i]);
        norm += exact[i] * exact[i];
      }
      // Relative RMS error: int8 ~0.5%, int4 (16 levels per group of 32) ~8%.
      EXPECT_LT(std::sqrt(err / norm), dtype == DType::kI8 ? 0.02 : 0.15)
          << dtype_name(dtype) << (int8_activations ? " W8A8" : " weight-only");
    }
  }
}

}  // namespace
}  // namespace pagoda
