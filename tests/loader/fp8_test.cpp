// FP8 (e4m3fn) weights: the code table against the format's definition, the encoder's rounding,
// and checkpoints converted at load (block-scaled with partial edge blocks, per tensor) into
// exact fp32 or int8/int4 panels, with the errors a broken checkpoint gets.
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "e4m3_reference.h"
#include "kernels/quantize.h"
#include "loader/fp8.h"
#include "loader/fp8_checkpoint.h"
#include "loader/safetensors.h"
#include "loader/safetensors_writer.h"
#include "test_helpers.h"
#include "util/half.h"

namespace pagoda {
namespace {

using test::e4m3_definition;

TEST(E4m3, EveryCodeMatchesTheFormatDefinition) {
  for (int code = 0; code < 256; ++code) {
    const float got = e4m3_to_f32(static_cast<uint8_t>(code));
    const double want = e4m3_definition(code);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "code " << code;
      continue;
    }
    EXPECT_FALSE(std::isinf(got)) << "code " << code;
    EXPECT_EQ(static_cast<double>(got), want) << "code " << code;
    EXPECT_EQ(std::signbit(got), code >= 128) << "code " << code;  // 0x80 is -0
  }
  EXPECT_EQ(e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), 0x1p-9f);
  EXPECT_EQ(e4m3_to_f32(0x08), 0x1p-6f);
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7F)) && std::isnan(e4m3_to_f32(0xFF)));
}

TEST(E4m3, ScaledDecodeIsOneFp32Product) {
  std::vector<uint8_t> codes(1000);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>((i * 77 + 3) % 256);
  std::vector<float> out(codes.size());
  const float scale = 0.0123f;
  e4m3_to_f32_scaled(codes.data(), static_cast<int64_t>(codes.size()), scale, out.data());
  for (size_t i = 0; i < codes.size(); ++i) {
    const float want = static_cast<float>(e4m3_definition(codes[i])) * scale;
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(out[i]));
    } else {
      EXPECT_EQ(out[i], want) << "code " << int(codes[i]);
    }
  }
}

TEST(E4m3, EncoderRoundsToNearestEvenAndSaturates) {
  for (int code = 0; code < 256; ++code) {
    if (code == 0x7F || code == 0xFF) continue;
    EXPECT_EQ(f32_to_e4m3(e4m3_to_f32(static_cast<uint8_t>(code))), code);
  }
  EXPECT_EQ(f32_to_e4m3(1.0625f), 0x38);   // halfway 1 (0x38) / 1.125: even code
  EXPECT_EQ(f32_to_e4m3(1.1875f), 0x3A);   // halfway 1.125 / 1.25 (0x3A): even code
  EXPECT_EQ(f32_to_e4m3(1.07f), 0x39);     // nearer 1.125
  EXPECT_EQ(f32_to_e4m3(0x1p-10f), 0x00);  // halfway 0 / 2^-9: even (zero)
  EXPECT_EQ(f32_to_e4m3(1000.0f), 0x7E);
  EXPECT_EQ(f32_to_e4m3(-1000.0f), 0xFE);
  EXPECT_EQ(f32_to_e4m3(std::nanf("")), 0x7F);
  // Against a search over every finite value in double.
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-500.0f, 500.0f);
  for (int i = 0; i < 2000; ++i) {
    const float x = dist(rng) * (i % 3 == 0 ? 1e-3f : 1.0f);
    const double got = e4m3_definition(f32_to_e4m3(x));
    double best = 0;
    for (int code = 0; code < 256; ++code) {
      const double v = e4m3_definition(code);
      if (!std::isnan(v) && std::fabs(v - x) < std::fabs(best - x)) best = v;
    }
    EXPECT_EQ(std::fabs(got - x), std::fabs(best - x)) << x;
  }
}

// A directory holding one safetensors file and a config.json with DeepSeek's FP8 config.
struct Fp8Dir {
  test::TempDir dir;
  std::vector<TensorBytes> tensors;

  template <typename T>
  void add(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
           const std::vector<T>& values) {
    TensorBytes t{{name, dtype, std::move(shape)}, {}};
    t.bytes.resize(values.size() * sizeof(T));
    std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
    tensors.push_back(std::move(t));
  }
  std::string write(const nlohmann::json& quantization_config = {
                        {"quant_method", "fp8"},
                        {"fmt", "e4m3"},
                        {"activation_scheme", "dynamic"},
                        {"weight_block_size", {128, 128}}}) {
    write_safetensors(dir.file("model.safetensors"), tensors);
    std::ofstream(dir.file("config.json"))
        << nlohmann::json{{"quantization_config", quantization_config}}.dump();
    return dir.str();
  }
};

std::vector<uint8_t> random_codes(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> codes(static_cast<size_t>(n));
  for (uint8_t& c : codes) {
    do c = static_cast<uint8_t>(rng());
    while ((c & 0x7F) == 0x7F);  // no NaN
  }
  return codes;
}

std::vector<float> random_scales(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(1e-4f, 1e-2f);
  std::vector<float> s(static_cast<size_t>(n));
  for (float& x : s) x = dist(rng);
  return s;
}

// DeepSeek-V3's kv_a_proj_with_mqa shape (576 rows: a partial last row block) at a width whose
// last column block is partial too.
constexpr int64_t kRows = 576, kCols = 320, kGridRows = 5, kGridCols = 3;

TEST(Fp8Checkpoint, BlockScalesDequantizeExactlyWithPartialEdgeBlocks) {
  Fp8Dir d;
  const auto codes = random_codes(kRows * kCols, 1);
  const auto scales = random_scales(kGridRows * kGridCols, 2);
  d.add("a.weight", "F8_E4M3", {kRows, kCols}, codes);
  d.add("a.weight_scale_inv", "F32", {kGridRows, kGridCols}, scales);
  const TensorStore store =
      TensorStore::open(d.write(), FileMemory::kMap, nullptr, nullptr, Fp8Weights::kDequant);
  const Tensor& w = store.get("a.weight", {kRows, kCols});
  ASSERT_EQ(w.dtype, DType::kF32);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < kCols; ++c) {
      const float want = static_cast<float>(e4m3_definition(codes[r * kCols + c])) *
                         scales[(r / 128) * kGridCols + c / 128];
      ASSERT_EQ(w.data_as<float>()[r * kCols + c], want) << r << "," << c;
    }
  }
}

TEST(Fp8Checkpoint, Int8AndInt4PanelsStayWithinTheirSteps) {
  Fp8Dir d;
  // 384 columns split into the 128-wide FP8 blocks (int8 groups of 128); 320 do not (one
  // group per row).
  const auto codes_a = random_codes(kRows * 384, 3), codes_b = random_codes(kRows * kCols, 4);
  const auto scales_a = random_scales(kGridRows * 3, 5), scales_b = random_scales(kGridRows * 3, 6);
  d.add("a.weight", "F8_E4M3", {kRows, 384}, codes_a);
  d.add("a.weight_scale_inv", "F32", {kGridRows, 3}, scales_a);
  d.add("b.weight", "F8_E4M3", {kRows, kCols}, codes_b);
  d.add("b.weight_scale_inv", "F32", {kGridRows, kGridCols}, scales_b);
  const std::string path = d.write();
  for (Fp8Weights mode : {Fp8Weights::kInt8, Fp8Weights::kInt4}) {
    const TensorStore store = TensorStore::open(path, FileMemory::kMap, nullptr, nullptr, mode);
    for (const char* name : {"a.weight", "b.weight"}) {
      const Tensor& t = store.get(name);
      const int64_t cols = t.shape[1];
      const auto& codes = cols == 384 ? codes_a : codes_b;
      const auto& scales = cols == 384 ? scales_a : scales_b;
      const int64_t want_group = mode == Fp8Weights::kInt4 ? 32 : cols == 384 ? 128 : cols;
      ASSERT_EQ(t.dtype, mode == Fp8Weights::kInt8 ? DType::kI8 : DType::kI4) << name;
      ASSERT_EQ(t.group_size, want_group) << name;
      const WeightView v{t.data, t.dtype, t.shape[0], cols, t.scales, t.mins, t.group_size};
      std::vector<float> row(static_cast<size_t>(cols));
      for (int64_t r = 0; r < kRows; r += 7) {
        dequantize_row_reference(v, r, row.data());
        for (int64_t c = 0; c < cols; ++c) {
          const float exact = static_cast<float>(e4m3_definition(codes[r * cols + c])) *
                              scales[(r / 128) * 3 + c / 128];
          const float step = f16_to_f32(t.scales[r * (cols / t.group_size) + c / t.group_size]);
          // int8: half a step; int4's fitted groups may clip an outlier by up to a step more.
          const float bound = mode == Fp8Weights::kInt8 ? 0.5f * step * 1.001f : 1.5f * step;
          ASSERT_LE(std::fabs(row[c] - exact), bound + 1e-7f) << name << " " << r << "," << c;
        }
      }
    }
  }
}

TEST(Fp8Checkpoint, PerTensorAndPerRowScales) {
  Fp8Dir d;
  const auto codes = random_codes(64 * 96, 7);
  d.add("t.weight", "F8_E4M3", {64, 96}, codes);
  d.add("t.weight_scale", "F32", {}, std::vector<float>{0.25f});
  d.add("r.weight", "F8_E4M3", {64, 96}, codes);
  const auto row_scales = random_scales(64, 8);
  d.add("r.weight_scale", "F32", {64, 1}, row_scales);
  // Per-tensor and per-row FP8 exports announce compressed-tensors (float-quantized).
  const TensorStore store = TensorStore::open(
      d.write({{"quant_method", "compressed-tensors"}, {"format", "float-quantized"}}),
      FileMemory::kMap, nullptr, nullptr, Fp8Weights::kDequant);
  const Tensor& t = store.get("t.weight", {64, 96});
  const Tensor& r = store.get("r.weight", {64, 96});
  for (int64_t i = 0; i < 64 * 96; ++i) {
    const float v = static_cast<float>(e4m3_definition(codes[i]));
    ASSERT_EQ(t.data_as<float>()[i], v * 0.25f);
    ASSERT_EQ(r.data_as<float>()[i], v * row_scales[i / 96]);
  }
}

TEST(Fp8Checkpoint, BrokenCheckpointsNameTheFileAndTensor) {
  const auto codes = random_codes(kRows * kCols, 9);
  {
    Fp8Dir d;
    d.add("layer.kv_a_proj_with_mqa.weight", "F8_E4M3", {kRows, kCols}, codes);
    const std::string path = d.write();
    test::expect_message(
        test::error_of([&] { TensorStore::open(path); }),
        {d.dir.file("model.safetensors"), "layer.kv_a_proj_with_mqa.weight", "weight_scale_inv"});
  }
  {
    Fp8Dir d;
    d.add("layer.kv_a_proj_with_mqa.weight", "F8_E4M3", {kRows, kCols}, codes);
    d.add("layer.kv_a_proj_with_mqa.weight_scale_inv", "F32", {4, 3}, random_scales(12, 1));
    const std::string path = d.write();
    test::expect_message(
        test::error_of([&] { TensorStore::open(path); }),
        {d.dir.file("model.safetensors"), "layer.kv_a_proj_with_mqa.weight_scale_inv", "[4, 3]",
         "expected [5, 3]", "[576, 320]"});
  }
  {
    Fp8Dir d;
    d.add("a.weight", "F8_E4M3", {kRows, kCols}, codes);
    d.add("a.weight_scale_inv", "F32", {kGridRows, kGridCols}, random_scales(15, 1));
    const std::string path = d.write({{"quant_method", "fp8"}, {"fmt", "e5m2"}});
    test::expect_message(test::error_of([&] { TensorStore::open(path); }),
                         {path, "quantization_config.fmt", "e5m2"});
  }
  {
    Fp8Dir d;
    d.add("a.weight", "F8_E4M3", {kRows, kCols}, codes);
    d.add("a.weight_scale_inv", "I32", {kGridRows, kGridCols}, std::vector<int32_t>(15, 1));
    const std::string path = d.write();
    test::expect_message(test::error_of([&] { TensorStore::open(path); }),
                         {d.dir.file("model.safetensors"), "a.weight_scale_inv", "I32"});
  }
  // Left as stored, an FP8 matrix is found but refused by name.
  Fp8Dir d;
  d.add("a.weight", "F8_E4M3", {kRows, kCols}, codes);
  const TensorStore store =
      TensorStore::open(d.write(), FileMemory::kMap, nullptr, nullptr, Fp8Weights::kAsStored);
  ASSERT_NE(store.find("a.weight"), nullptr);
  test::expect_message(test::error_of([&] { store.get("a.weight"); }), {"a.weight", "F8_E4M3"});
}

TEST(Fp8Checkpoint, ParsesTheFlag) {
  EXPECT_EQ(parse_fp8_weights("dequant"), Fp8Weights::kDequant);
  EXPECT_EQ(parse_fp8_weights("int8"), Fp8Weights::kInt8);
  EXPECT_EQ(parse_fp8_weights("int4"), Fp8Weights::kInt4);
  test::expect_message(test::error_of([] { parse_fp8_weights("fp16"); }),
                       {"--fp8-weights", "fp16"});
}

}  // namespace
}  // namespace pagoda
