// GGUF reader and repacker: metadata of every value type, real llama.cpp files, one-line errors
// for malformed files, and each block type's repack against a scalar dequantization written
// here from ggml's block definitions (ggml-common.h / ggml-quants.c).
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/test_paths.h"
#include "kernels/quantize.h"
#include "loader/gguf.h"
#include "loader/gguf_builder.h"
#include "loader/gguf_repack.h"
#include "loader/gguf_writer.h"
#include "test_helpers.h"
#include "util/half.h"

namespace pagoda {
namespace {

using test::error_of;
using test::expect_message;
using test::GgufBuilder;
using test::TempDir;

const std::string kTestdata = pagoda::test::testdata_dir().string();

std::shared_ptr<const GgufFile> open(const std::string& path) {
  return std::make_shared<const GgufFile>(path);
}

// ---- metadata --------------------------------------------------------------------------------

TEST(Gguf, ReadsEveryMetadataType) {
  TempDir dir;
  GgufBuilder b;
  b.kv<uint8_t>("u8", GgufBuilder::kU8, 200);
  b.kv<int8_t>("i8", GgufBuilder::kI8, -100);
  b.kv<uint16_t>("u16", GgufBuilder::kU16, 60000);
  b.kv<int16_t>("i16", GgufBuilder::kI16, -30000);
  b.kv<uint32_t>("u32", GgufBuilder::kU32, 4000000000u);
  b.kv<int32_t>("i32", GgufBuilder::kI32, -2000000000);
  b.kv<float>("f32", GgufBuilder::kF32, 1.5f);
  b.kv<uint8_t>("flag", GgufBuilder::kBool, 1);
  b.kv_string("name", "tiny \xe2\x96\x81 model");
  b.kv<uint64_t>("u64", GgufBuilder::kU64, 1ull << 40);
  b.kv<int64_t>("i64", GgufBuilder::kI64, -(1ll << 40));
  b.kv<double>("f64", GgufBuilder::kF64, 1e-6);
  b.kv_array<int32_t>("ints", GgufBuilder::kI32, {3, -4, 5});
  b.kv_array<float>("floats", GgufBuilder::kF32, {0.25f, -2.0f});
  b.kv_string_array("strings", {"a", "", "b c"});
  // An array of two arrays of u8.
  std::vector<uint8_t> nested;
  GgufBuilder::put<uint32_t>(nested, GgufBuilder::kArray);
  GgufBuilder::put<uint64_t>(nested, 2);
  for (int i = 0; i < 2; ++i) {
    GgufBuilder::put<uint32_t>(nested, GgufBuilder::kU8);
    GgufBuilder::put<uint64_t>(nested, 1);
    GgufBuilder::put<uint8_t>(nested, static_cast<uint8_t>(7 + i));
  }
  b.kv_raw("nested", GgufBuilder::kArray, nested);
  b.write(dir.file("m.gguf"));

  GgufFile f(dir.file("m.gguf"));
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.metadata().size(), 16u);
  EXPECT_EQ(f.get_int("u8"), 200);
  EXPECT_EQ(f.get_int("i8"), -100);
  EXPECT_EQ(f.get_int("u16"), 60000);
  EXPECT_EQ(f.get_int("i16"), -30000);
  EXPECT_EQ(f.get_int("u32"), 4000000000ll);
  EXPECT_EQ(f.get_int("i32"), -2000000000);
  EXPECT_EQ(f.get_float("f32"), 1.5);
  EXPECT_EQ(f.find_bool("flag"), true);
  EXPECT_EQ(f.get_string("name"), "tiny \xe2\x96\x81 model");
  EXPECT_EQ(f.get_int("u64"), 1ll << 40);
  EXPECT_EQ(f.get_int("i64"), -(1ll << 40));
  EXPECT_EQ(f.get_float("f64"), 1e-6);
  EXPECT_EQ(f.get_float("i32"), -2e9);  // integers are accepted as numbers
  EXPECT_EQ(f.int_array("ints"), (std::vector<int64_t>{3, -4, 5}));
  EXPECT_EQ(f.float_array("floats"), (std::vector<float>{0.25f, -2.0f}));
  const auto strings = f.string_array("strings");
  ASSERT_EQ(strings.size(), 3u);
  EXPECT_EQ(strings[0], "a");
  EXPECT_EQ(strings[1], "");
  EXPECT_EQ(strings[2], "b c");
  const GgufValue* n = f.find("nested");
  ASSERT_NE(n, nullptr);
  ASSERT_EQ(n->arrays.size(), 2u);
  EXPECT_EQ(n->arrays[1].elements[0], 8);
  EXPECT_FALSE(f.find_int("absent").has_value());
  EXPECT_TRUE(f.string_array("absent").empty());
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_TRUE(f.tensors().empty());

  const std::string path = dir.file("m.gguf");
  expect_message(error_of([&] { f.get_int("name"); }),
                 {path, "'name'", "string", "expected an integer"});
  expect_message(error_of([&] { f.get_string("u8"); }), {path, "'u8'", "uint8"});
  expect_message(error_of([&] { f.get_int("missing"); }), {path, "'missing'", "missing"});
  expect_message(error_of([&] { f.string_array("ints"); }), {path, "array of int32"});
}

TEST(Gguf, ReadsRealVocabFile) {
  const std::string path = kTestdata + "/llama.cpp-vocab/ggml-vocab-deepseek-llm.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "shared test data absent: " << path;
  GgufFile f(path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "deepseek-llm");
  EXPECT_EQ(f.string_array("tokenizer.ggml.tokens").size(), 102400u);
  EXPECT_EQ(f.string_array("tokenizer.ggml.merges").size(), 99757u);
  EXPECT_EQ(f.int_array("tokenizer.ggml.token_type").size(), 102400u);
  EXPECT_EQ(f.get_int("tokenizer.ggml.bos_token_id"), 100000);
  EXPECT_EQ(f.get_int("llama.block_count"), 30);
  EXPECT_EQ(f.get_int("llama.embedding_length"), 4096);
}

TEST(Gguf, ReadsRealModelFileAndKeepsFloatTensorsInPlace) {
  const std::string path = kTestdata + "/models/llama-2-tiny-random/llama-2-tiny-random.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "shared test data absent: " << path;
  auto f = open(path);
  EXPECT_EQ(f->tensors().size(), 12u);
  EXPECT_EQ(f->get_int("llama.embedding_length"), 8);
  EXPECT_EQ(f->string_array("tokenizer.ggml.tokens").size(), 32000u);
  EXPECT_EQ(f->float_array("tokenizer.ggml.scores").size(), 32000u);
  const GgufTensorInfo* embd = f->find_tensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->dims, (std::vector<int64_t>{8, 32000}));
  for (const GgufTensorInfo& t : f->tensors()) {
    EXPECT_EQ(t.offset % f->alignment(), 0u) << t.name;
    EXPECT_EQ(t.data, f->find_tensor(t.name)->data);
  }
  RepackedTensor r = repack_gguf_tensor(f, *embd, "model.embed_tokens.weight");
  EXPECT_EQ(r.tensor.shape, (std::vector<int64_t>{32000, 8}));
  EXPECT_EQ(r.tensor.dtype, embd->type == ggml_type::kF16 ? DType::kF16 : DType::kF32);
  EXPECT_EQ(r.tensor.data, embd->data);  // zero-copy
  EXPECT_EQ(r.keep_alive.get(), f.get());
}

// ---- malformed files -------------------------------------------------------------------------

GgufBuilder small_valid_file() {
  GgufBuilder b;
  b.kv_string("general.architecture", "llama");
  b.kv_string_array("tokenizer.ggml.tokens", {"a", "b"});
  std::vector<uint8_t> f32(4 * 8);
  for (size_t i = 0; i < f32.size(); ++i) f32[i] = static_cast<uint8_t>(i);
  b.tensor("a.weight", {4, 2}, ggml_type::kF32, f32);
  b.tensor("b.weight", {32, 1}, ggml_type::kQ8_0, std::vector<uint8_t>(34, 1));
  return b;
}

TEST(Gguf, SmallValidFileOpens) {
  TempDir dir;
  small_valid_file().write(dir.file("ok.gguf"));
  GgufFile f(dir.file("ok.gguf"));
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.tensors()[1].offset, 32u);
  EXPECT_EQ(f.tensors()[1].size_bytes, 34);
  EXPECT_EQ(f.tensors()[0].shape(), (std::vector<int64_t>{2, 4}));
}

TEST(Gguf, EveryTruncationIsAnError) {
  TempDir dir;
  const std::vector<uint8_t> bytes = small_valid_file().build();
  const std::string path = dir.file("cut.gguf");
  for (size_t size = 0; size < bytes.size(); ++size) {
    GgufBuilder::write_file(path, std::vector<uint8_t>(bytes.begin(), bytes.begin() + size));
    const std::string message = error_of([&] { GgufFile f(path); });
    expect_message(message, {path});
  }
}

void expect_open_error(const GgufBuilder& b, std::initializer_list<std::string> parts) {
  TempDir dir;
  const std::string path = dir.file("bad.gguf");
  b.write(path);
  std::vector<std::string> all{path};
  all.insert(all.end(), parts.begin(), parts.end());
  const std::string message = error_of([&] { GgufFile f(path); });
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  for (const std::string& part : all) {
    EXPECT_NE(message.find(part), std::string::npos) << "expected '" << part << "' in: " << message;
  }
}

TEST(Gguf, MalformedHeadersGiveOneLineErrors) {
  GgufBuilder b = small_valid_file();
  b.magic = 0x4c4d4747;  // "GGML"
  expect_open_error(b, {"not a GGUF file"});

  b = small_valid_file();
  b.version = 1;
  expect_open_error(b, {"version 1"});
  b.version = 3u << 24;
  expect_open_error(b, {"unsupported GGUF version", "big-endian"});

  b = small_valid_file();
  b.kv_count_override = 1ull << 60;
  expect_open_error(b, {"metadata count"});
  b = small_valid_file();
  b.tensor_count_override = 1ull << 50;
  expect_open_error(b, {"tensor count"});

  b = small_valid_file();
  b.kv<uint32_t>("weird", 13, 0);
  expect_open_error(b, {"'weird'", "unknown value type 13"});

  b = small_valid_file();
  b.kv_string("general.architecture", "again");
  expect_open_error(b, {"'general.architecture' appears twice"});

  b = small_valid_file();
  std::vector<uint8_t> huge_array;
  GgufBuilder::put<uint32_t>(huge_array, GgufBuilder::kU32);
  GgufBuilder::put<uint64_t>(huge_array, 1ull << 62);
  b.kv_raw("big", GgufBuilder::kArray, huge_array);
  expect_open_error(b, {"'big'", "elements"});

  b = small_valid_file();
  b.kv<uint64_t>("general.alignment", GgufBuilder::kU64, 64);
  expect_open_error(b, {"general.alignment", "uint64", "expected uint32"});
  b = small_valid_file();
  b.kv<uint32_t>("general.alignment", GgufBuilder::kU32, 48);
  expect_open_error(b, {"not a power of two"});
}

TEST(Gguf, MalformedTensorInfosGiveOneLineErrors) {
  GgufBuilder b = small_valid_file();
  b.tensors[1].type = 99;
  expect_open_error(b, {"tensor b.weight", "unknown ggml type id 99"});
  b.tensors[1].type = 4;  // Q4_2, removed from ggml
  expect_open_error(b, {"tensor b.weight", "unknown ggml type id 4"});

  b = small_valid_file();
  b.tensors[1].offset = 4096;
  b.tensors[1].write_data = false;
  expect_open_error(b, {"tensor b.weight", "extends past the end"});
  b.tensors[1].write_data = true;
  b.tensors[1].offset = 16;
  expect_open_error(b, {"tensor b.weight", "offset 16", "alignment 32"});
  b.tensors[1].offset = 0;
  expect_open_error(b, {"a.weight", "b.weight", "overlap"});

  b = small_valid_file();
  b.tensors[1].dims = {16, 2};
  expect_open_error(b, {"tensor b.weight", "not a multiple", "Q8_0", "32"});
  b.tensors[1].dims = {32, 0};
  expect_open_error(b, {"tensor b.weight", "dimension 1 = 0"});
  b.tensors[1].dims = {32, 1, 1, 1, 1};
  expect_open_error(b, {"tensor b.weight", "5 dimensions"});
  b.tensors[1].dims = {32, 1ull << 62};
  expect_open_error(b, {"tensor b.weight", "impossible"});

  b = small_valid_file();
  b.tensors[1].name = "a.weight";
  expect_open_error(b, {"tensor a.weight appears twice"});
}

TEST(Gguf, UnsupportedTypeNamesTensorAndType) {
  TempDir dir;
  GgufBuilder b;
  b.tensor("blk.0.ffn_down.weight", {256, 2}, 10 /* Q2_K */, std::vector<uint8_t>(2 * 84));
  b.write(dir.file("q2k.gguf"));
  auto f = open(dir.file("q2k.gguf"));
  expect_message(error_of([&] { repack_gguf_tensor(f, f->tensors()[0], "x"); }),
                 {dir.file("q2k.gguf"), "blk.0.ffn_down.weight", "Q2_K", "cannot load"});
}

// ---- repacking -------------------------------------------------------------------------------

// Reference dequantization of one GGUF row, element by element, from ggml's block definitions.
float ref_half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

void ref_scale_min_6bit(const uint8_t* s, int j, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

float ref_dequant(uint32_t type, const uint8_t* row, int64_t i) {
  switch (type) {
    case ggml_type::kQ8_0: {
      const uint8_t* b = row + 34 * (i / 32);
      return ref_half(b) * static_cast<int8_t>(b[2 + i % 32]);
    }
    case ggml_type::kQ4_0:
    case ggml_type::kQ4_1: {
      const bool has_min = type == ggml_type::kQ4_1;
      const uint8_t* b = row + (has_min ? 20 : 18) * (i / 32);
      const uint8_t* qs = b + (has_min ? 4 : 2);
      const int j = static_cast<int>(i % 32);
      const int q = j < 16 ? (qs[j] & 15) : (qs[j - 16] >> 4);
      return has_min ? q * ref_half(b) + ref_half(b + 2) : (q - 8) * ref_half(b);
    }
    case ggml_type::kQ5_0: {
      const uint8_t* b = row + 22 * (i / 32);
      uint32_t qh;
      std::memcpy(&qh, b + 2, 4);
      const int j = static_cast<int>(i % 32);
      const int low = j < 16 ? (b[6 + j] & 15) : (b[6 + j - 16] >> 4);
      return ref_half(b) * ((low | static_cast<int>((qh >> j) & 1) << 4) - 16);
    }
    case ggml_type::kQ4_K: {
      const uint8_t* b = row + 144 * (i / 256);
      const int e = static_cast<int>(i % 256), s = e / 32, l = e % 32;
      int sc, m;
      ref_scale_min_6bit(b + 4, s, sc, m);
      const int q = (b[16 + 32 * (s / 2) + l] >> (4 * (s % 2))) & 15;
      return ref_half(b) * sc * q - ref_half(b + 2) * m;
    }
    case ggml_type::kQ5_K: {
      const uint8_t* b = row + 176 * (i / 256);
      const int e = static_cast<int>(i % 256), s = e / 32, l = e % 32;
      int sc, m;
      ref_scale_min_6bit(b + 4, s, sc, m);
      const int q =
          ((b[48 + 32 * (s / 2) + l] >> (4 * (s % 2))) & 15) + 16 * ((b[16 + l] >> s) & 1);
      return ref_half(b) * sc * q - ref_half(b + 2) * m;
    }
    case ggml_type::kQ6_K: {
      const uint8_t* b = row + 210 * (i / 256);
      const int e = static_cast<int>(i % 256), half = e / 128, k = (e % 128) / 32, l = e % 32;
      const uint8_t low_byte = b[64 * half + l + 32 * (k % 2)];
      const int low = k < 2 ? (low_byte & 15) : (low_byte >> 4);
      const int high = (b[128 + 32 * half + l] >> (2 * k)) & 3;
      const int sc = static_cast<int8_t>(b[192 + 8 * half + l / 16 + 2 * k]);
      return ref_half(b + 208) * sc * ((low | high << 4) - 32);
    }
    default:
      ADD_FAILURE() << "no reference for type " << type;
      return 0;
  }
}

// Element c of row r of a repacked Pagoda tensor (util/dtype.h layouts).
float pagoda_value(const Tensor& t, int64_t r, int64_t c) {
  const int64_t cols = t.shape.back();
  const int64_t g = r * (cols / t.group_size) + c / t.group_size;
  const float scale = f16_to_f32(t.scales[g]);
  if (t.dtype == DType::kI8) return scale * static_cast<int8_t>(t.data[r * cols + c]);
  const uint8_t* run = t.data + r * cols / 2 + (c / 32) * 16;
  const int j = static_cast<int>(c % 32);
  const int q = j < 16 ? (run[j] & 15) : (run[j - 16] >> 4);
  return scale * q + f16_to_f32(t.mins[g]);
}

struct BlockType {
  uint32_t type;
  int64_t block_size, block_bytes;
  std::vector<int> half_offsets;  // where fp16 scales sit inside a block
};

// Random blocks with sensible fp16 scale fields (random bytes elsewhere).
std::vector<uint8_t> random_blocks(const BlockType& bt, int64_t num_blocks, std::mt19937& rng) {
  std::vector<uint8_t> bytes(static_cast<size_t>(num_blocks * bt.block_bytes));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.0005f, 0.05f);
  for (auto& x : bytes) x = static_cast<uint8_t>(byte(rng));
  for (int64_t b = 0; b < num_blocks; ++b) {
    for (int off : bt.half_offsets) {
      const uint16_t h = f32_to_f16(byte(rng) < 128 ? scale(rng) : -scale(rng));
      std::memcpy(bytes.data() + b * bt.block_bytes + off, &h, 2);
    }
  }
  return bytes;
}

class GgufRepack : public ::testing::TestWithParam<BlockType> {};

TEST_P(GgufRepack, MatchesScalarDequantization) {
  const BlockType bt = GetParam();
  const int64_t rows = 6, cols = 512;
  std::mt19937 rng(1234 + bt.type);
  TempDir dir;
  GgufBuilder b;
  b.tensor("w", {static_cast<uint64_t>(cols), static_cast<uint64_t>(rows)}, bt.type,
           random_blocks(bt, rows * cols / bt.block_size, rng));
  b.write(dir.file("q.gguf"));
  auto f = open(dir.file("q.gguf"));
  const GgufTensorInfo& info = f->tensors()[0];
  RepackedTensor r = repack_gguf_tensor(f, info, "w");
  const Tensor& t = r.tensor;
  ASSERT_EQ(t.shape, (std::vector<int64_t>{rows, cols}));
  ASSERT_EQ(t.group_size, 32);
  ASSERT_NE(t.scales, nullptr);
  const bool exact = bt.type == ggml_type::kQ8_0 || bt.type == ggml_type::kQ4_0 ||
                     bt.type == ggml_type::kQ4_1 || bt.type == ggml_type::kQ5_0;
  const bool requantized = bt.type == ggml_type::kQ6_K || bt.type == ggml_type::kQ5_K;
  EXPECT_EQ(t.dtype, requantized || bt.type == ggml_type::kQ8_0 || bt.type == ggml_type::kQ5_0
                         ? DType::kI8
                         : DType::kI4);
  if (t.dtype == DType::kI4) {  // Q4_0 is w = d (q - 8): the kernels may skip its mins
    const WeightView v{t.data, t.dtype, rows, cols, t.scales, t.mins, t.group_size};
    EXPECT_EQ(symmetric_int4_mins(v), bt.type == ggml_type::kQ4_0);
  }
  const int64_t row_bytes = info.size_bytes / rows;
  double max_rel_step = 0;
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t g = 0; g < cols / 32; ++g) {
      float absmax = 0;
      for (int64_t c = 32 * g; c < 32 * g + 32; ++c) {
        absmax = std::max(absmax, std::fabs(ref_dequant(bt.type, info.data + row * row_bytes, c)));
      }
      for (int64_t c = 32 * g; c < 32 * g + 32; ++c) {
        const float want = ref_dequant(bt.type, info.data + row * row_bytes, c);
        const float got = pagoda_value(t, row, c);
        if (exact) {
          ASSERT_EQ(got, want) << "row " << row << " col " << c;
        } else if (requantized) {
          // Half a step of the fp16-rounded scale absmax / 127 (+ its rounding).
          const float bound = absmax / 254.0f * (1.0f + 1.0f / 1024) + 1e-7f;
          ASSERT_LE(std::fabs(got - want), bound) << "row " << row << " col " << c;
          if (absmax > 0)
            max_rel_step = std::max<double>(max_rel_step, std::fabs(got - want) / absmax);
        } else {  // Q4_K: fp16(d*sc) and fp16(dmin*m) each off by at most 2^-11 relative
          const uint8_t* block = info.data + row * row_bytes + 144 * (c / 256);
          int sc, m;
          ref_scale_min_6bit(block + 4, static_cast<int>((c % 256) / 32), sc, m);
          const float bound =
              (15.0f * std::fabs(ref_half(block) * sc) + std::fabs(ref_half(block + 2) * m)) /
                  2048.0f +
              1e-7f;
          ASSERT_LE(std::fabs(got - want), bound) << "row " << row << " col " << c;
        }
      }
    }
  }
  if (requantized) {
    EXPECT_GT(max_rel_step, 0.0) << "requantization cannot be exact on random data";
  }
}

INSTANTIATE_TEST_SUITE_P(AllBlockTypes, GgufRepack,
                         ::testing::Values(BlockType{ggml_type::kQ8_0, 32, 34, {0}},
                                           BlockType{ggml_type::kQ4_0, 32, 18, {0}},
                                           BlockType{ggml_type::kQ4_1, 32, 20, {0, 2}},
                                           BlockType{ggml_type::kQ5_0, 32, 22, {0}},
                                           BlockType{ggml_type::kQ4_K, 256, 144, {0, 2}},
                                           BlockType{ggml_type::kQ5_K, 256, 176, {0, 2}},
                                           BlockType{ggml_type::kQ6_K, 256, 210, {208}}),
                         [](const auto& info) { return ggml_type_name(info.param.type); });

// llama.cpp's convert_hf_to_gguf permute(): rows viewed as [heads, 2, head_dim / 2] have their
// last two axes swapped. Applying it to known rows and repacking with unpermute_heads must give
// the original rows back, in float and in quantized layouts.
std::vector<int64_t> llama_cpp_permutation(int64_t num_heads, int64_t head_dim) {
  std::vector<int64_t> gguf_row_of_hf_row(static_cast<size_t>(num_heads * head_dim));
  for (int64_t h = 0; h < num_heads; ++h) {
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t j = 0; j < head_dim / 2; ++j) {
        gguf_row_of_hf_row[h * head_dim + i * head_dim / 2 + j] = h * head_dim + j * 2 + i;
      }
    }
  }
  return gguf_row_of_hf_row;
}

TEST(GgufRepackPermutation, UndoesLlamaCppQkPermutation) {
  const int64_t heads = 3, head_dim = 8, rows = heads * head_dim, cols = 32;
  const auto perm = llama_cpp_permutation(heads, head_dim);
  TempDir dir;
  GgufBuilder b;
  std::vector<uint8_t> f32(static_cast<size_t>(rows * cols * 4));
  std::vector<uint8_t> q8(static_cast<size_t>(rows * 34));
  for (int64_t hf = 0; hf < rows; ++hf) {
    const int64_t g = perm[hf];
    for (int64_t c = 0; c < cols; ++c) {
      const float v = static_cast<float>(hf * 100 + c);
      std::memcpy(f32.data() + (g * cols + c) * 4, &v, 4);
      q8[g * 34 + 2 + c] = static_cast<uint8_t>(hf);  // row identity in the int8 values
    }
    const uint16_t d = f32_to_f16(static_cast<float>(hf + 1));  // and in the scale
    std::memcpy(q8.data() + g * 34, &d, 2);
  }
  b.tensor("blk.0.attn_q.weight", {cols, rows}, ggml_type::kF32, f32);
  b.tensor("blk.0.attn_k.weight", {cols, rows}, ggml_type::kQ8_0, q8);
  b.write(dir.file("p.gguf"));
  auto f = open(dir.file("p.gguf"));
  RepackedTensor q = repack_gguf_tensor(f, f->tensors()[0], "q", heads);
  RepackedTensor k = repack_gguf_tensor(f, f->tensors()[1], "k", heads);
  EXPECT_NE(q.tensor.data, f->tensors()[0].data);  // a shuffled copy
  for (int64_t hf = 0; hf < rows; ++hf) {
    EXPECT_EQ(llama_permuted_row(hf, head_dim), perm[hf]);
    for (int64_t c = 0; c < cols; ++c) {
      ASSERT_EQ(q.tensor.data_as<float>()[hf * cols + c], static_cast<float>(hf * 100 + c));
      ASSERT_EQ(static_cast<int8_t>(k.tensor.data[hf * cols + c]), hf);
    }
    EXPECT_EQ(f16_to_f32(k.tensor.scales[hf]), static_cast<float>(hf + 1));
  }
  expect_message(error_of([&] { repack_gguf_tensor(f, f->tensors()[0], "q", 5); }),
                 {"blk.0.attn_q.weight", "24 rows", "5 heads"});
}

// A file from the loader room's own GgufWriter (written independently, with ggml's reference
// Q8_0/Q4_0 quantizers) reads back through this reader and repacker to the writer's
// dequantized values.
TEST(GgufRepackPermutation, ReadsGgufWriterOutput) {
  TempDir dir;
  const int64_t rows = 3, cols = 64;
  std::vector<float> w(static_cast<size_t>(rows * cols));
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (float& x : w) x = normal(rng);
  GgufWriter writer;
  writer.set_string("general.architecture", "llama");
  writer.set_array_string("tokenizer.ggml.tokens", {"x", "y"});
  for (GgmlType type : {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kF16}) {
    std::vector<uint8_t> bytes(static_cast<size_t>(ggml_nbytes(type, rows * cols)));
    encode_f32(type, w.data(), rows * cols, bytes.data());
    writer.add_tensor_bytes(ggml_type_name(type), {rows, cols}, type, bytes);
  }
  writer.write(dir.file("w.gguf"));

  auto f = open(dir.file("w.gguf"));
  EXPECT_EQ(f->string_array("tokenizer.ggml.tokens").size(), 2u);
  ASSERT_EQ(f->tensors().size(), 3u);
  std::vector<float> want(static_cast<size_t>(rows * cols));
  for (const GgufTensorInfo& info : f->tensors()) {
    RepackedTensor r = repack_gguf_tensor(f, info, info.name);
    ASSERT_EQ(r.tensor.shape, (std::vector<int64_t>{rows, cols})) << info.name;
    if (info.type == ggml_type::kF16) {
      for (int64_t i = 0; i < rows * cols; ++i) {
        EXPECT_EQ(f16_to_f32(r.tensor.data_as<uint16_t>()[i]), f16_to_f32(f32_to_f16(w[i])));
      }
      continue;
    }
    if (info.type == ggml_type::kQ8_0) {
      dequantize_q8_0(info.data, rows * cols, want.data());
    } else {
      dequantize_q4_0(info.data, rows * cols, want.data());
    }
    for (int64_t row = 0; row < rows; ++row) {
      for (int64_t c = 0; c < cols; ++c) {
        ASSERT_EQ(pagoda_value(r.tensor, row, c), want[row * cols + c]) << info.name;
      }
    }
  }
}

}  // namespace
}  // namespace pagoda
