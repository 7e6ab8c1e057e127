// f16 weights on a kernel table with fp16 arithmetic (AArch64 +fp16, KernelTable::f16_arithmetic):
// the loader widens a matrix to fp32 when one of its weights exceeds 511 in magnitude, where the
// kernels' fp16 products could overflow, and keeps every other f16 matrix as stored (in place).
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "../loader/test_helpers.h"
#include "device/cpu_device.h"
#include "kernels/host_context.h"
#include "kernels/kernels.h"
#include "loader/safetensors.h"
#include "loader/safetensors_writer.h"
#include "model/weights.h"
#include "util/half.h"

namespace pagoda {
namespace {

// A [2, 64] f16 matrix of small weights, with `big` at one position.
std::vector<uint8_t> f16_matrix(float big) {
  std::vector<f16_t> h(128);
  for (size_t i = 0; i < h.size(); ++i)
    h[i] = f32_to_f16(0.01f * static_cast<float>(i % 17) - 0.08f);
  h[77] = f32_to_f16(big);
  std::vector<uint8_t> bytes(h.size() * 2);
  std::memcpy(bytes.data(), h.data(), bytes.size());
  return bytes;
}

struct F16Weights : ::testing::Test {
  F16Weights() {
    write_safetensors(
        dir.file("model.safetensors"),
        {{{"fits.weight", "F16", {2, 64}}, f16_matrix(-511.0f)},
         {{"large.weight", "F16", {2, 64}}, f16_matrix(-511.5f)},
         {{"inf.weight", "F16", {2, 64}}, f16_matrix(-std::numeric_limits<float>::infinity())}});
    store = std::make_unique<TensorStore>(TensorStore::open(dir.str()));
    fp16_table.f16_arithmetic = true;
  }
  test::TempDir dir;
  std::unique_ptr<TensorStore> store;
  KernelTable fp16_table = *kernels_for("scalar");
};

TEST_F(F16Weights, LargeWeightsAreWidenedExactlyForFp16Arithmetic) {
  WeightLoader loader(*store, WeightOptions{}, ExecutionContext(cpu_device(), fp16_table));
  const WeightView fits = loader.matrix("fits.weight", 2, 64);
  EXPECT_EQ(fits.dtype, DType::kF16);
  EXPECT_EQ(fits.data, store->get("fits.weight").data);  // in place, not copied
  for (const char* name : {"large.weight", "inf.weight"}) {
    const WeightView w = loader.matrix(name, 2, 64);
    ASSERT_EQ(w.dtype, DType::kF32) << name;
    const auto* stored = reinterpret_cast<const f16_t*>(store->get(name).data);
    const auto* wide = static_cast<const float*>(w.data);
    for (int i = 0; i < 128; ++i) {
      const float want = f16_to_f32(stored[i]);
      EXPECT_EQ(std::memcmp(&wide[i], &want, 4), 0) << name << " at " << i;
    }
  }
  // The copies are resident memory the loader counts: one f16 matrix and two fp32 ones.
  EXPECT_EQ(loader.weight_bytes(), 128 * 2 + 2 * 128 * 4);
}

TEST_F(F16Weights, Fp32ArithmeticKeepsEveryF16MatrixAsStored) {
  KernelTable fp32_table = *kernels_for("scalar");
  ASSERT_FALSE(fp32_table.f16_arithmetic);
  WeightLoader loader(*store, WeightOptions{}, ExecutionContext(cpu_device(), fp32_table));
  for (const char* name : {"fits.weight", "large.weight", "inf.weight"}) {
    const WeightView w = loader.matrix(name, 2, 64);
    EXPECT_EQ(w.dtype, DType::kF16) << name;
    EXPECT_EQ(w.data, store->get(name).data) << name;
  }
}

// The host's context computes with this CPU's table: on AArch64 with +fp16 (run under qemu by
// scripts/qemu-model-tests.sh) the large matrices come back in fp32.
TEST_F(F16Weights, TheHostTableDecides) {
  WeightLoader loader(*store, WeightOptions{}, host_execution_context());
  const DType want = kernels().f16_arithmetic ? DType::kF32 : DType::kF16;
  EXPECT_EQ(loader.matrix("fits.weight", 2, 64).dtype, DType::kF16);
  EXPECT_EQ(loader.matrix("large.weight", 2, 64).dtype, want) << kernels().isa;
}

}  // namespace
}  // namespace pagoda
