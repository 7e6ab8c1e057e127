// int8 W8A8 matrices packed into lane panels at load (kernels/lane_panels.h) for the tables that
// read them (KernelTable::int8_lane_panels): quantized at load and stored int8 in a mapped file
// are packed, in place of their row-major bytes (counted once), and multiply to the bits the
// row-major matrix gives on the same table; tables without the flag, and bytes a converter
// holds in memory, stay row-major.
#include <bit>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "../loader/test_helpers.h"
#include "kernels/kernels.h"
#include "kernels/lane_panels.h"
#include "kernels/quantize.h"
#include "loader/safetensors.h"
#include "loader/safetensors_writer.h"
#include "model/weights.h"
#include "util/half.h"

namespace pagoda {
namespace {

constexpr int64_t kRows = 37, kCols = 64;  // 3 panels, the last with 5 rows

template <class T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

struct LanePanelWeights : ::testing::Test {
  LanePanelWeights() {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    std::vector<float> f(kRows * kCols);
    for (float& v : f) v = unit(rng);
    std::vector<int8_t> q(kRows * kCols);
    std::vector<uint16_t> scales(kRows * 2);
    quantize_rows_i8(f.data(), kRows, kCols, 32, q.data(), scales.data());
    write_safetensors(dir.file("model.safetensors"),
                      {{{"float.weight", "F32", {kRows, kCols}}, bytes_of(f)},
                       {{"int8.weight", "I8", {kRows, kCols}}, bytes_of(q)},
                       {{"int8.weight_scale", "F16", {kRows, 2}}, bytes_of(scales)}});
    store = std::make_unique<TensorStore>(TensorStore::open(dir.str()));
    for (float& v : x) v = unit(rng);
  }

  // The loader's view with `table`, and its bits against the same matrix unpacked.
  WeightOptions options(const KernelTable* table, int64_t group_size) const {
    WeightOptions o;
    o.quantize_to = DType::kI8;
    o.group_size = group_size;
    o.kernels = table;
    return o;
  }
  void expect_same_bits(const KernelTable& table, const WeightView& packed,
                        const WeightView& row_major) const {
    for (int64_t tokens : {1, 3, 12}) {
      std::vector<float> a(tokens * kRows), b(tokens * kRows);
      table.matmul(x.data(), tokens, packed, 0, kRows, a.data(), kRows);
      table.matmul(x.data(), tokens, row_major, 0, kRows, b.data(), kRows);
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(a[i]), std::bit_cast<uint32_t>(b[i]))
            << table.isa << " tokens=" << tokens << " at " << i;
      }
    }
  }

  test::TempDir dir;
  std::unique_ptr<TensorStore> store;
  std::vector<float> x = std::vector<float>(12 * kCols);
};

// The x86 tables that read lane panels on this CPU (avx2; avx512 without VNNI).
std::vector<const KernelTable*> panel_tables() {
  std::vector<const KernelTable*> tables;
  for (const char* isa : {"avx2", "avx512"}) {
    const KernelTable* t = kernels_for(isa);
    if (t != nullptr && t->int8_lane_panels) tables.push_back(t);
  }
  return tables;
}

TEST_F(LanePanelWeights, QuantizedAtLoadIsPackedInPlaceOfItsRows) {
  const std::vector<const KernelTable*> tables = panel_tables();
  if (tables.empty()) GTEST_SKIP() << "no table here reads lane panels";
  for (const KernelTable* table : tables) {
    KernelTable row_major_table = *table;
    row_major_table.int8_lane_panels = false;
    for (int64_t group : {int64_t{32}, int64_t{0}}) {  // 0: per channel
      WeightLoader loader(*store, options(table, group));
      WeightLoader plain_loader(*store, options(&row_major_table, group));
      const WeightView packed = loader.matrix("float.weight", kRows, kCols);
      const WeightView row_major = plain_loader.matrix("float.weight", kRows, kCols);
      ASSERT_NE(packed.lane_panels, nullptr) << table->isa;
      EXPECT_EQ(packed.data, nullptr);
      EXPECT_EQ(row_major.lane_panels, nullptr);
      const int64_t group_size = group == 0 ? kCols : group;
      EXPECT_EQ(loader.weight_bytes(), 3 * lane_panel_bytes(kCols, group_size));
      EXPECT_EQ(plain_loader.weight_bytes(), kRows * kCols + kRows * (kCols / group_size) * 2);
      expect_same_bits(*table, packed, row_major);
    }
  }
}

TEST_F(LanePanelWeights, StoredInt8FromAFileMapIsPackedAndShardsToo) {
  const std::vector<const KernelTable*> tables = panel_tables();
  if (tables.empty()) GTEST_SKIP() << "no table here reads lane panels";
  const Tensor& stored = store->get("int8.weight");
  ASSERT_TRUE(store->maps_from_file(stored));
  for (const KernelTable* table : tables) {
    WeightOptions o;  // no quantization at load: the matrix is used as stored
    o.kernels = table;
    WeightLoader loader(*store, o);
    const WeightView packed = loader.matrix("int8.weight", kRows, kCols);
    ASSERT_NE(packed.lane_panels, nullptr) << table->isa;
    EXPECT_EQ(loader.weight_bytes(), 3 * lane_panel_bytes(kCols, 32));
    KernelTable row_major_table = *table;
    row_major_table.int8_lane_panels = false;
    o.kernels = &row_major_table;
    WeightLoader plain_loader(*store, o);
    const WeightView row_major = plain_loader.matrix("int8.weight", kRows, kCols);
    EXPECT_EQ(row_major.data, stored.data);  // in place
    expect_same_bits(*table, packed, row_major);

    // A tensor-parallel shard's rows are packed on their own.
    const WeightView shard = loader.matrix_rows("int8.weight", kRows, kCols, 16, 21);
    ASSERT_NE(shard.lane_panels, nullptr);
    std::vector<float> expected(kCols), actual(kCols);
    for (int64_t r = 0; r < 21; ++r) {
      dequantize_row_reference(row_major, 16 + r, expected.data());
      table->dequantize_row(shard, r, actual.data());
      ASSERT_EQ(actual, expected) << "shard row " << r;
    }
  }
}

TEST_F(LanePanelWeights, OtherTablesAndMemoryBytesStayRowMajor) {
  const KernelTable& scalar = *kernels_for("scalar");
  ASSERT_FALSE(scalar.int8_lane_panels);
  WeightOptions o;
  o.kernels = &scalar;
  WeightLoader loader(*store, o);
  EXPECT_EQ(loader.matrix("int8.weight", kRows, kCols).lane_panels, nullptr);
  EXPECT_EQ(loader.matrix("float.weight", kRows, kCols).lane_panels, nullptr);  // not quantized

  // Bytes a converter made in memory (a GGUF file's repacked blocks) are not mapped: packing
  // them would keep both copies.
  std::vector<int8_t> values(kRows * kCols, 3);
  Tensor in_memory = store->get("int8.weight");
  in_memory.data = reinterpret_cast<const uint8_t*>(values.data());
  EXPECT_FALSE(store->maps_from_file(in_memory));
}

}  // namespace
}  // namespace pagoda
