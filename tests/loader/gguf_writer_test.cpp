// GgufWriter and the Q8_0 / Q4_0 block quantizers. Files are read back by an independent
// reader, tests/loader/gguf_reference.py (struct + numpy under Debian's /usr/bin/python3),
// which also re-quantizes the source values with numpy versions of ggml's reference
// quantizers and compares bytes; the in-process checks use a scalar formula written here.
#include "loader/gguf_writer.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/test_paths.h"
#include "test_helpers.h"
#include "util/half.h"

namespace pagoda {
namespace {

using test::error_of;
using test::expect_message;
using test::TempDir;

const char kPython[] = "/usr/bin/python3";

// Values that exercise the quantizers' edge cases block by block: random normals, an all-zero
// block, a block whose largest magnitude is negative, a tie of +m and -m (the first wins in
// Q4_0), values that land exactly on .5 after scaling, and tiny values near fp16's range.
std::vector<float> test_values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(rng);
  auto block = [&](int64_t b) { return v.data() + b * 32; };
  const int64_t num_blocks = n / 32;
  if (num_blocks > 1) std::fill_n(block(1), 32, 0.0f);
  if (num_blocks > 2) block(2)[7] = -9.0f;
  if (num_blocks > 3) {
    block(3)[3] = 5.0f;
    block(3)[20] = -5.0f;
  }
  if (num_blocks > 4) {
    for (int j = 0; j < 32; ++j) block(4)[j] = static_cast<float>(j - 16) * 0.5f;
    block(4)[31] = 127.0f;  // scale 1: x * id = x exactly, so the .5 cases round away from 0
  }
  if (num_blocks > 5) {
    for (int j = 0; j < 32; ++j) block(5)[j] = static_cast<float>(j + 1) * 1e-6f;
  }
  return v;
}

// ggml's quantize_row_q8_0_ref for one block, written out plainly.
std::vector<uint8_t> q8_0_block_reference(const float* x) {
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127;
  const float id = d != 0 ? 1 / d : 0;
  std::vector<uint8_t> out(34);
  const uint16_t h = f32_to_f16(d);
  out[0] = static_cast<uint8_t>(h & 0xff);
  out[1] = static_cast<uint8_t>(h >> 8);
  for (int j = 0; j < 32; ++j)
    out[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(roundf(x[j] * id)));
  return out;
}

// ggml's quantize_row_q4_0_ref for one block.
std::vector<uint8_t> q4_0_block_reference(const float* x) {
  float amax = 0, max = 0;
  for (int j = 0; j < 32; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / -8;
  const float id = d != 0 ? 1 / d : 0;
  std::vector<uint8_t> out(18);
  const uint16_t h = f32_to_f16(d);
  out[0] = static_cast<uint8_t>(h & 0xff);
  out[1] = static_cast<uint8_t>(h >> 8);
  for (int j = 0; j < 16; ++j) {
    int lo = static_cast<int8_t>(x[j] * id + 8.5f);
    int hi = static_cast<int8_t>(x[j + 16] * id + 8.5f);
    out[2 + j] = static_cast<uint8_t>(std::min(15, lo) | std::min(15, hi) << 4);
  }
  return out;
}

TEST(GgufQuantize, Q8_0MatchesTheScalarReferenceBlockByBlock) {
  const std::vector<float> x = test_values(32 * 8, 1);
  std::vector<uint8_t> got(8 * kQ8_0BlockBytes);
  quantize_q8_0(x.data(), 32 * 8, got.data());
  for (int b = 0; b < 8; ++b) {
    const std::vector<uint8_t> want = q8_0_block_reference(x.data() + b * 32);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin() + b * kQ8_0BlockBytes))
        << "block " << b;
  }
  // Half-way cases round away from zero: block 4 has scale exactly 1.
  EXPECT_EQ(static_cast<int8_t>(got[4 * kQ8_0BlockBytes + 2 + 15]), -1);  // -0.5
  EXPECT_EQ(static_cast<int8_t>(got[4 * kQ8_0BlockBytes + 2 + 17]), 1);   // +0.5
}

TEST(GgufQuantize, Q4_0MatchesTheScalarReferenceBlockByBlock) {
  const std::vector<float> x = test_values(32 * 8, 2);
  std::vector<uint8_t> got(8 * kQ4_0BlockBytes);
  quantize_q4_0(x.data(), 32 * 8, got.data());
  for (int b = 0; b < 8; ++b) {
    const std::vector<uint8_t> want = q4_0_block_reference(x.data() + b * 32);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin() + b * kQ4_0BlockBytes))
        << "block " << b;
  }
  // Block 3 ties +5 and -5: the first (+5) sets d = 5 / -8 < 0.
  uint16_t d16 =
      static_cast<uint16_t>(got[3 * kQ4_0BlockBytes] | got[3 * kQ4_0BlockBytes + 1] << 8);
  EXPECT_FLOAT_EQ(f16_to_f32(d16), -0.625f);
}

TEST(GgufQuantize, DequantizedValuesAreWithinHalfAStep) {
  const int64_t n = 32 * 64;
  const std::vector<float> x = test_values(n, 3);
  std::vector<uint8_t> q8(static_cast<size_t>(ggml_nbytes(GgmlType::kQ8_0, n)));
  std::vector<uint8_t> q4(static_cast<size_t>(ggml_nbytes(GgmlType::kQ4_0, n)));
  quantize_q8_0(x.data(), n, q8.data());
  quantize_q4_0(x.data(), n, q4.data());
  std::vector<float> y8(static_cast<size_t>(n)), y4(static_cast<size_t>(n));
  dequantize_q8_0(q8.data(), n, y8.data());
  dequantize_q4_0(q4.data(), n, y4.data());
  for (int64_t b = 0; b < n / 32; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    // Half a step of rounding, plus the scale's own fp16 rounding times the largest |q|
    // (which dominates when the scale is an fp16 subnormal, as in block 5). Q4_0 clips the
    // side opposite the signed maximum at 7 steps, so its bound is a whole step.
    const float d8 = amax / 127, d4 = amax / 8;
    const float d8_error = std::fabs(f16_to_f32(f32_to_f16(d8)) - d8);
    const float d4_error = std::fabs(f16_to_f32(f32_to_f16(d4)) - d4);
    const float bound8 = d8 / 2 + 127 * d8_error + amax * 1e-6f;
    const float bound4 = d4 + 8 * d4_error + amax * 1e-6f;
    for (int j = 0; j < 32; ++j) {
      const size_t i = static_cast<size_t>(b * 32 + j);
      EXPECT_LE(std::fabs(y8[i] - x[i]), bound8) << i;
      EXPECT_LE(std::fabs(y4[i] - x[i]), bound4) << i;
    }
  }
}

TEST(GgufQuantize, ByteSizesAndPartialBlocks) {
  EXPECT_EQ(ggml_nbytes(GgmlType::kF32, 5), 20);
  EXPECT_EQ(ggml_nbytes(GgmlType::kBF16, 5), 10);
  EXPECT_EQ(ggml_nbytes(GgmlType::kQ8_0, 64), 68);
  EXPECT_EQ(ggml_nbytes(GgmlType::kQ4_0, 64), 36);
  expect_message(error_of([] { ggml_nbytes(GgmlType::kQ4_0, 48); }), {"48", "Q4_0", "32"});
}

// ---- files, read back by the Python reader -----------------------------------------------

struct Written {
  nlohmann::json report;
  std::string path;
};

nlohmann::json run_reference(const std::string& gguf, const std::string& sources,
                             const std::string& out) {
  const std::string script =
      pagoda::test::source_dir().string() + "/tests/loader/gguf_reference.py";
  const std::string cmd =
      std::string(kPython) + " " + script + " " + gguf + " " + sources + " " + out + " 2>&1";
  const int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << cmd;
  std::ifstream in(out);
  return nlohmann::json::parse(in);
}

void write_floats(const std::string& path, const std::vector<float>& v) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
}

class GgufFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kPython) ||
        std::system((std::string(kPython) + " -c 'import numpy' 2>/dev/null").c_str()) != 0)
      GTEST_SKIP() << kPython << " with numpy is needed for the reference reader";
  }
  TempDir dir_;
};

TEST_F(GgufFileTest, MetadataOfEveryTypeReadsBack) {
  GgufWriter w;
  w.set_u8("t.u8", 200);
  w.set_i8("t.i8", -100);
  w.set_u16("t.u16", 60000);
  w.set_i16("t.i16", -30000);
  w.set_u32("t.u32", 4000000000u);
  w.set_i32("t.i32", -2000000000);
  w.set_u64("t.u64", 18000000000000000000ull);
  w.set_i64("t.i64", -9000000000000000000ll);
  w.set_f32("t.f32", 1e-6f);
  w.set_f64("t.f64", 3.141592653589793);
  w.set_bool("t.bool", true);
  w.set_string("t.string", "héllo ｜▁ world");
  w.set_string("t.empty", "");
  const std::vector<uint8_t> u8s = {1, 2, 255};
  const std::vector<int32_t> i32s = {-1, 0, 7};
  const std::vector<uint32_t> u32s = {};
  const std::vector<int64_t> i64s = {-5, 1ll << 40};
  const std::vector<float> f32s = {0.5f, -2.25f};
  const std::vector<double> f64s = {1e300};
  const bool bools[] = {true, false, true};
  w.set_array_u8("a.u8", u8s);
  w.set_array_i32("a.i32", i32s);
  w.set_array_u32("a.u32_empty", u32s);
  w.set_array_i64("a.i64", i64s);
  w.set_array_f32("a.f32", f32s);
  w.set_array_f64("a.f64", f64s);
  w.set_array_bool("a.bool", bools);
  w.set_array_string("a.string", {"a", "", "Ġt", "<｜User｜>"});

  const std::string path = dir_.file("meta.gguf");
  w.write(path);
  EXPECT_EQ(static_cast<int64_t>(std::filesystem::file_size(path)), w.file_bytes());
  const nlohmann::json r = run_reference(path, dir_.str(), dir_.file("report.json"));
  EXPECT_EQ(r["version"], 3);
  EXPECT_EQ(r["alignment"], 32);
  EXPECT_EQ(r["tensors"].size(), 0u);
  const nlohmann::json& kv = r["kv"];
  ASSERT_EQ(kv.size(), 21u);
  auto expect_kv = [&](const char* key, int type, const nlohmann::json& value) {
    ASSERT_TRUE(kv.contains(key)) << key;
    EXPECT_EQ(kv[key]["type"], type) << key;
    EXPECT_EQ(kv[key]["value"], value) << key;
  };
  expect_kv("t.u8", 0, 200);
  expect_kv("t.i8", 1, -100);
  expect_kv("t.u16", 2, 60000);
  expect_kv("t.i16", 3, -30000);
  expect_kv("t.u32", 4, 4000000000u);
  expect_kv("t.i32", 5, -2000000000);
  expect_kv("t.f32", 6, static_cast<double>(1e-6f));
  expect_kv("t.bool", 7, true);
  expect_kv("t.string", 8, "héllo ｜▁ world");
  expect_kv("t.empty", 8, "");
  expect_kv("t.u64", 10, 18000000000000000000ull);
  expect_kv("t.i64", 11, -9000000000000000000ll);
  expect_kv("t.f64", 12, 3.141592653589793);
  auto expect_array = [&](const char* key, int elem_type, const nlohmann::json& values) {
    expect_kv(key, 9, nlohmann::json{{"array_type", elem_type}, {"values", values}});
  };
  expect_array("a.u8", 0, {1, 2, 255});
  expect_array("a.i32", 5, {-1, 0, 7});
  expect_array("a.u32_empty", 4, nlohmann::json::array());
  expect_array("a.i64", 11, {-5, 1ll << 40});
  expect_array("a.f32", 6, {0.5, -2.25});
  expect_array("a.f64", 12, {1e300});
  expect_array("a.bool", 7, {true, false, true});
  expect_array("a.string", 8, {"a", "", "Ġt", "<｜User｜>"});
}

TEST_F(GgufFileTest, TensorsOfEveryTypeMatchNumpyEncodings) {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  struct Case {
    std::string name;
    std::vector<int64_t> shape;
    GgmlType type;
  };
  const std::vector<Case> cases = {
      {"norm.f32", {5}, GgmlType::kF32},  // 20 bytes: the next offset needs padding
      {"w.f16", {3, 64}, GgmlType::kF16},         {"w.bf16", {3, 64}, GgmlType::kBF16},
      {"w.q8_0", {4, 96}, GgmlType::kQ8_0},       {"w.q4_0", {4, 96}, GgmlType::kQ4_0},
      {"cube.q8_0", {2, 3, 32}, GgmlType::kQ8_0}, {"big.q4_0", {17, 256}, GgmlType::kQ4_0},
  };
  uint32_t seed = 10;
  for (const Case& c : cases) {
    int64_t n = 1;
    for (int64_t d : c.shape) n *= d;
    std::vector<float> values = test_values(n, seed++);
    if (c.type == GgmlType::kBF16) values[5] = std::nanf("");
    write_floats(dir_.file(c.name + ".f32"), values);
    std::vector<uint8_t> bytes(static_cast<size_t>(ggml_nbytes(c.type, n)));
    encode_f32(c.type, values.data(), n, bytes.data());
    w.add_tensor_bytes(c.name, c.shape, c.type, std::move(bytes));
  }
  const std::string path = dir_.file("tensors.gguf");
  w.write(path);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_EQ(static_cast<int64_t>(std::filesystem::file_size(path)), w.file_bytes());

  const nlohmann::json r = run_reference(path, dir_.str(), dir_.file("report.json"));
  ASSERT_EQ(r["tensors"].size(), cases.size());
  EXPECT_EQ(r["data_start"].get<int64_t>() % 32, 0);
  EXPECT_LE(r["data_end"].get<int64_t>(), r["file_size"].get<int64_t>());
  const int expected_ids[] = {0, 1, 30, 8, 2, 8, 2};
  for (size_t i = 0; i < cases.size(); ++i) {
    const nlohmann::json& t = r["tensors"][i];
    SCOPED_TRACE(cases[i].name);
    EXPECT_EQ(t["name"], cases[i].name);
    EXPECT_EQ(t["type"], expected_ids[i]);
    // ggml's ne is the shape reversed.
    std::vector<int64_t> ne(cases[i].shape.rbegin(), cases[i].shape.rend());
    EXPECT_EQ(t["ne"].get<std::vector<int64_t>>(), ne);
    EXPECT_EQ(t["offset"].get<int64_t>() % 32, 0);
    ASSERT_TRUE(t.contains("matches_source"));
    EXPECT_TRUE(t["matches_source"].get<bool>())
        << "first differing byte " << t.value("first_mismatch_byte", -1) << ", "
        << t.value("num_mismatched_bytes", 0) << " bytes differ";
  }
  // Round trip error, as the numpy decoder sees it (q4_0 step is absmax / 8).
  EXPECT_EQ(r["tensors"][0]["max_abs_error"].get<double>(), 0.0);
  EXPECT_LT(r["tensors"][3]["max_abs_error"].get<double>(),
            r["tensors"][3]["max_abs_source"].get<double>() / 127);
  EXPECT_LT(r["tensors"][4]["max_abs_error"].get<double>(),
            r["tensors"][4]["max_abs_source"].get<double>() / 8 + 1e-3);
}

TEST_F(GgufFileTest, ProducersRunAtWriteTimeAndOtherAlignmentsAreRecorded) {
  GgufWriter w(64);
  int calls = 0;
  w.add_tensor("ones", {2, 32}, GgmlType::kF32, [&](uint8_t* dst, int64_t size_bytes) {
    ++calls;
    EXPECT_EQ(size_bytes, 2 * 32 * 4);
    const std::vector<float> ones(64, 1.0f);
    std::memcpy(dst, ones.data(), 256);
  });
  w.add_tensor("tail", {3}, GgmlType::kF32, [&](uint8_t* dst, int64_t) {
    ++calls;
    const float v[3] = {1.5f, -2.0f, 3.0f};
    std::memcpy(dst, v, 12);
  });
  EXPECT_EQ(calls, 0);
  write_floats(dir_.file("ones.f32"), std::vector<float>(64, 1.0f));
  write_floats(dir_.file("tail.f32"), {1.5f, -2.0f, 3.0f});
  const std::string path = dir_.file("aligned.gguf");
  w.write(path);
  EXPECT_EQ(calls, 2);
  const nlohmann::json r = run_reference(path, dir_.str(), dir_.file("report.json"));
  EXPECT_EQ(r["alignment"], 64);
  EXPECT_EQ(r["kv"]["general.alignment"]["type"], 4);
  EXPECT_EQ(r["data_start"].get<int64_t>() % 64, 0);
  EXPECT_EQ(r["tensors"][1]["offset"], 256);
  EXPECT_TRUE(r["tensors"][0]["matches_source"].get<bool>());
  EXPECT_TRUE(r["tensors"][1]["matches_source"].get<bool>());
  EXPECT_EQ(static_cast<int64_t>(std::filesystem::file_size(path)), w.file_bytes());
}

// ---- errors ------------------------------------------------------------------------------

TEST(GgufWriterErrors, RepeatedKeysAndTensorsAndBadShapesNameTheCulprit) {
  GgufWriter w;
  w.set_u32("llama.block_count", 2);
  expect_message(error_of([&] { w.set_string("llama.block_count", "x"); }),
                 {"llama.block_count", "twice"});
  w.add_tensor_bytes("a", {32}, GgmlType::kF32, std::vector<uint8_t>(128));
  expect_message(
      error_of([&] { w.add_tensor_bytes("a", {32}, GgmlType::kF32, std::vector<uint8_t>(128)); }),
      {"'a'", "twice"});
  expect_message(error_of([&] {
                   w.add_tensor("b", {4, 48}, GgmlType::kQ8_0, nullptr);
                 }),
                 {"'b'", "Q8_0", "[4, 48]"});
  expect_message(error_of([&] {
                   w.add_tensor("c", {4, 0}, GgmlType::kF32, nullptr);
                 }),
                 {"'c'", "[4, 0]"});
  expect_message(error_of([&] {
                   w.add_tensor_bytes("d", {2, 32}, GgmlType::kF16, std::vector<uint8_t>(10));
                 }),
                 {"'d'", "10 bytes", "128"});
  expect_message(error_of([] { GgufWriter bad(48); }), {"48", "power of two"});
  EXPECT_EQ(w.num_tensors(), 1u);
}

TEST(GgufWriterErrors, AFailedWriteNamesThePathAndLeavesNothing) {
  TempDir dir;
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  const std::string missing = dir.file("no/such/dir/model.gguf");
  expect_message(error_of([&] { w.write(missing); }), {missing + ".tmp", "cannot create"});

  // A producer that throws: the temporary file is removed and the target never appears.
  w.add_tensor("boom", {32}, GgmlType::kF32,
               [](uint8_t*, int64_t) { throw Error("tensor boom: source unreadable"); });
  const std::string path = dir.file("model.gguf");
  expect_message(error_of([&] { w.write(path); }), {"boom", "unreadable"});
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

}  // namespace
}  // namespace pagoda
