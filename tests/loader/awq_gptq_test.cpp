// AWQ and GPTQ checkpoints repack into kI4 exactly: the tensors are packed here from known
// values following each format's documented layout (loader/awq_gptq.h), and every weight must
// dequantize to scale * (q - zero).
#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "kernels/quantize.h"
#include "loader/safetensors.h"
#include "loader/safetensors_writer.h"
#include "test_helpers.h"
#include "util/half.h"

namespace pagoda {
namespace {

constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};

struct Reference {
  int64_t out = 16, in = 128, group = 32;
  std::vector<int> q;            // [in, out]
  std::vector<int> z;            // [groups, out], 1..15
  std::vector<uint16_t> scales;  // [groups, out] fp16
  std::vector<int32_t> g_idx;    // [in]
  int64_t groups() const { return in / group; }
  float weight(int64_t o, int64_t c) const {
    const int64_t g = g_idx[static_cast<size_t>(c)];
    return f16_to_f32(scales[static_cast<size_t>(g * out + o)]) *
           static_cast<float>(q[static_cast<size_t>(c * out + o)] -
                              z[static_cast<size_t>(g * out + o)]);
  }
};

Reference make_reference(bool act_order) {
  Reference r;
  std::mt19937 rng(42);
  std::uniform_int_distribution<int> nib(0, 15), zero(1, 15);
  std::uniform_real_distribution<float> scale(0.001f, 0.02f);
  for (int64_t i = 0; i < r.in * r.out; ++i) r.q.push_back(nib(rng));
  for (int64_t i = 0; i < r.groups() * r.out; ++i) {
    r.z.push_back(zero(rng));
    r.scales.push_back(f32_to_f16(scale(rng)));
  }
  for (int64_t c = 0; c < r.in; ++c) {
    r.g_idx.push_back(static_cast<int32_t>(act_order ? c % r.groups() : c / r.group));
  }
  return r;
}

std::vector<uint8_t> as_bytes(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  return std::vector<uint8_t>(b, b + n);
}

// Packs a [rows, out] nibble matrix along `out`, 8 per word, plain or AWQ-interleaved.
std::vector<int32_t> pack_along_out(const std::vector<int>& v, int64_t rows, int64_t out, bool awq,
                                    int offset) {
  std::vector<int32_t> words(static_cast<size_t>(rows * out / 8), 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < out / 8; ++k) {
      uint32_t w = 0;
      for (int i = 0; i < 8; ++i) {
        const int64_t col = 8 * k + (awq ? kAwqOrder[i] : i);
        w |= static_cast<uint32_t>(v[static_cast<size_t>(r * out + col)] + offset) << (4 * i);
      }
      words[static_cast<size_t>(r * (out / 8) + k)] = static_cast<int32_t>(w);
    }
  }
  return words;
}

void write_checkpoint(const test::TempDir& dir, const Reference& r, const std::string& method,
                      bool with_g_idx, int bits = 4) {
  const bool awq = method == "awq";
  std::vector<int32_t> qweight;
  if (awq) {
    qweight = pack_along_out(r.q, r.in, r.out, true, 0);
  } else {
    qweight.assign(static_cast<size_t>(r.in / 8 * r.out), 0);
    for (int64_t i = 0; i < r.in / 8; ++i) {
      for (int64_t o = 0; o < r.out; ++o) {
        uint32_t w = 0;
        for (int j = 0; j < 8; ++j) {
          w |= static_cast<uint32_t>(r.q[static_cast<size_t>((8 * i + j) * r.out + o)]) << (4 * j);
        }
        qweight[static_cast<size_t>(i * r.out + o)] = static_cast<int32_t>(w);
      }
    }
  }
  // GPTQ's original format stores zero - 1.
  const std::vector<int32_t> qzeros = pack_along_out(r.z, r.groups(), r.out, awq, awq ? 0 : -1);
  const std::string p = "model.layers.0.mlp.up_proj.";
  std::vector<TensorBytes> tensors = {
      {{p + "qweight", "I32",
        awq ? std::vector<int64_t>{r.in, r.out / 8} : std::vector<int64_t>{r.in / 8, r.out}},
       as_bytes(qweight.data(), qweight.size() * 4)},
      {{p + "qzeros", "I32", {r.groups(), r.out / 8}}, as_bytes(qzeros.data(), qzeros.size() * 4)},
      {{p + "scales", "F16", {r.groups(), r.out}}, as_bytes(r.scales.data(), r.scales.size() * 2)},
  };
  if (with_g_idx) {
    tensors.push_back({{p + "g_idx", "I32", {r.in}}, as_bytes(r.g_idx.data(), r.g_idx.size() * 4)});
  }
  write_safetensors(dir.file("model.safetensors"), tensors);
  nlohmann::json qc = {{"quant_method", method}, {"bits", bits}, {"group_size", r.group}};
  if (awq) qc["version"] = "gemm";
  std::ofstream(dir.file("config.json")) << nlohmann::json{{"quantization_config", qc}}.dump();
}

void expect_matches(const TensorStore& store, const Reference& r, float tolerance_in_steps) {
  const Tensor& t = store.get("model.layers.0.mlp.up_proj.weight", {r.out, r.in});
  ASSERT_EQ(t.dtype, DType::kI4);
  ASSERT_EQ(t.group_size, r.group);
  const WeightView w{t.data, t.dtype, r.out, r.in, t.scales, t.mins, t.group_size};
  std::vector<float> row(static_cast<size_t>(r.in));
  for (int64_t o = 0; o < r.out; ++o) {
    dequantize_row_reference(w, o, row.data());
    for (int64_t c = 0; c < r.in; ++c) {
      const int64_t g = r.g_idx[static_cast<size_t>(c)];
      const float s = f16_to_f32(r.scales[static_cast<size_t>(g * r.out + o)]);
      // Exact repacking differs only by rounding scale * zero to fp16 (< 16 s * 2^-11). A
      // refitted group is allowed `tolerance_in_steps` of its own int4 step (range / 15).
      float lo = r.weight(o, c / 32 * 32), hi = lo;
      for (int64_t k = c / 32 * 32; k < c / 32 * 32 + 32; ++k) {
        lo = std::min(lo, r.weight(o, k));
        hi = std::max(hi, r.weight(o, k));
      }
      const float tol =
          tolerance_in_steps > 0 ? tolerance_in_steps * (hi - lo) / 15 : 16 * s / 2048;
      EXPECT_NEAR(row[static_cast<size_t>(c)], r.weight(o, c), tol) << o << "," << c;
    }
  }
}

TEST(AwqGptq, GptqRepacksExactly) {
  for (bool with_g_idx : {false, true}) {
    test::TempDir dir;
    const Reference r = make_reference(false);
    write_checkpoint(dir, r, "gptq", with_g_idx);
    expect_matches(TensorStore::open(dir.str()), r, 0);
  }
}

TEST(AwqGptq, AwqRepacksExactly) {
  test::TempDir dir;
  const Reference r = make_reference(false);
  write_checkpoint(dir, r, "awq", false);
  expect_matches(TensorStore::open(dir.str()), r, 0);
}

TEST(AwqGptq, ActOrderGroupsAreRequantizedClosely) {
  test::TempDir dir;
  const Reference r = make_reference(true);
  write_checkpoint(dir, r, "gptq", true);
  // Scattered groups are refitted into contiguous ones: a few quantization steps of error.
  expect_matches(TensorStore::open(dir.str()), r, 1.5f);
}

TEST(AwqGptq, UnsupportedBitsAndBadShapesAreErrors) {
  test::TempDir dir;
  const Reference r = make_reference(false);
  write_checkpoint(dir, r, "gptq", false, 8);
  test::expect_message(test::error_of([&] { TensorStore::open(dir.str()); }), {"8 bits"});

  test::TempDir dir2;
  Reference bad = r;
  write_checkpoint(dir2, bad, "gptq", false);
  nlohmann::json qc = {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 64}};
  std::ofstream(dir2.file("config.json")) << nlohmann::json{{"quantization_config", qc}}.dump();
  test::expect_message(test::error_of([&] { TensorStore::open(dir2.str()); }), {"qzeros", "shape"});
}

}  // namespace
}  // namespace pagoda
