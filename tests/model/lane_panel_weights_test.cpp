// int8 W8A8 and int4 W4A8 matrices packed into lane panels at load (kernels/lane_panels.h) for
// the tables that read them (KernelTable::int8_lane_panels, int4_lane_panels: int4 on AArch64
// only): quantized at load, stored int8 / int4 (with zero points or symmetric), and the rows and
// columns of tensor-parallel shards are packed on the host, in place of their row-major bytes,
// and go to the device like any other converted weight (in place on the CPU device, copied
// into a device the host cannot write), counted once. They must multiply to the bits the
// row-major matrix gives on the same table for 1..40 tokens; tables without the flag, a stored
// table also read by rows (a tied embedding) and bytes a converter holds in memory for the CPU
// device stay row-major, unless the store lets go of the converter's bytes once they are
// packed (WeightOptions::release_converted), which frees a buffer with its last tensor. A
// stored int8 matrix from a file map is packed a few MiB of rows at a time, each step's file
// pages (values and scales) dropped once packed, into the bytes the whole matrix packs into.
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "../loader/test_helpers.h"
#include "device/cpu_device.h"
#include "device/execution_context.h"
#include "kernels/kernels.h"
#include "kernels/lane_panels.h"
#include "kernels/quantize.h"
#include "loader/safetensors.h"
#include "loader/safetensors_writer.h"
#include "model/weights.h"
#include "recording_device.h"
#include "util/half.h"
#include "util/mapped_file.h"

namespace pagoda {
namespace {

constexpr int64_t kRows = 37, kCols = 64;  // a last panel of 5 rows (16-row) or 1 (4-row)
constexpr int64_t kMaxTokens = 40;

template <class T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// The tables that read lane panels of `dtype` on this CPU (int8: x86's avx2 and avx512 without
// VNNI in 16 x 2 panels; AArch64's neon_dotprod in 4 x 4, neon_i8mm in 4 x 8; int4: the AArch64
// ones only).
std::vector<const KernelTable*> panel_tables(DType dtype = DType::kI8) {
  std::vector<const KernelTable*> tables;
  for (const char* isa : {"avx2", "avx512", "neon_dotprod", "neon_i8mm"}) {
    const KernelTable* t = kernels_for(isa);
    if (t != nullptr && t->lane_panel_layout(dtype)) tables.push_back(t);
  }
  return tables;
}

// Bytes of the kRows-row int8 matrix's panels in `table`'s layout: rows padded to whole
// panels, each a byte a value and an fp16 scale a group.
int64_t panels_bytes(const KernelTable& table, int64_t group_size) {
  const int64_t panel_rows = table.int8_lane_panels.rows;
  const int64_t padded_rows = (kRows + panel_rows - 1) / panel_rows * panel_rows;
  return padded_rows * (kCols + kCols / group_size * 2);
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
    std::vector<uint8_t> q4(kRows * kCols / 2);
    std::vector<uint16_t> scales4(kRows * 2), mins4(kRows * 2), symmetric_mins4(kRows * 2);
    quantize_rows_i4(f.data(), kRows, kCols, 32, q4.data(), scales4.data(), mins4.data());
    // The same nibbles as Q4_0 stores them: w = scale (q - 8).
    for (size_t i = 0; i < scales4.size(); ++i)
      symmetric_mins4[i] = f32_to_f16(-8.0f * f16_to_f32(scales4[i]));
    write_safetensors(dir.file("model.safetensors"),
                      {{{"float.weight", "F32", {kRows, kCols}}, bytes_of(f)},
                       {{"int8.weight", "I8", {kRows, kCols}}, bytes_of(q)},
                       {{"int8.weight_scale", "F16", {kRows, 2}}, bytes_of(scales)},
                       {{"int4.weight", "U8", {kRows, kCols / 2}}, q4},
                       {{"int4.weight_scale", "F16", {kRows, 2}}, bytes_of(scales4)},
                       {{"int4.weight_min", "F16", {kRows, 2}}, bytes_of(mins4)},
                       {{"q4_0.weight", "U8", {kRows, kCols / 2}}, q4},
                       {{"q4_0.weight_scale", "F16", {kRows, 2}}, bytes_of(scales4)},
                       {{"q4_0.weight_min", "F16", {kRows, 2}}, bytes_of(symmetric_mins4)}});
    store = std::make_unique<TensorStore>(TensorStore::open(dir.str()));
    for (float& v : x) v = unit(rng);
  }

  static WeightOptions quantized_at_load(int64_t group_size, DType to = DType::kI8) {
    WeightOptions o;
    o.quantize_to = to;
    o.group_size = group_size;
    return o;
  }

  // `packed` and `row_major` ([rows, cols]) give the same bits on `table` for 1..40 tokens.
  void expect_same_bits(const KernelTable& table, const WeightView& packed,
                        const WeightView& row_major) const {
    ASSERT_NE(packed.lane_panels, nullptr) << table.isa;
    ASSERT_EQ(row_major.lane_panels, nullptr);
    const int64_t rows = row_major.rows, cols = row_major.cols;
    for (int64_t tokens = 1; tokens <= kMaxTokens; ++tokens) {
      std::vector<float> a(tokens * rows), b(tokens * rows);
      table.matmul(x.data(), tokens, packed, 0, rows, a.data(), rows);
      table.matmul(x.data(), tokens, row_major, 0, rows, b.data(), rows);
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(a[i]), std::bit_cast<uint32_t>(b[i]))
            << table.isa << " cols=" << cols << " tokens=" << tokens << " at " << i;
      }
    }
  }

  test::TempDir dir;
  std::unique_ptr<TensorStore> store;
  std::vector<float> x = std::vector<float>(kMaxTokens * kCols);
};

TEST_F(LanePanelWeights, QuantizedAtLoadIsPackedInPlaceOfItsRows) {
  const std::vector<const KernelTable*> tables = panel_tables();
  if (tables.empty()) GTEST_SKIP() << "no table here reads lane panels";
  for (const KernelTable* table : tables) {
    KernelTable row_major_table = *table;
    row_major_table.int8_lane_panels = {};
    const ExecutionContext ctx(cpu_device(), *table), plain_ctx(cpu_device(), row_major_table);
    for (int64_t group : {int64_t{32}, int64_t{0}}) {  // 0: per channel
      WeightLoader loader(*store, quantized_at_load(group), ctx);
      WeightLoader plain_loader(*store, quantized_at_load(group), plain_ctx);
      const WeightView packed = loader.matrix("float.weight", kRows, kCols);
      const WeightView row_major = plain_loader.matrix("float.weight", kRows, kCols);
      EXPECT_EQ(packed.data, nullptr);
      EXPECT_EQ(packed.scales, nullptr);
      const int64_t group_size = group == 0 ? kCols : group;
      EXPECT_EQ(loader.weight_bytes(), panels_bytes(*table, group_size));
      EXPECT_EQ(plain_loader.weight_bytes(), kRows * kCols + kRows * (kCols / group_size) * 2);
      expect_same_bits(*table, packed, row_major);
    }
  }
}

TEST_F(LanePanelWeights, StoredInt8AndItsShardsArePacked) {
  const std::vector<const KernelTable*> tables = panel_tables();
  if (tables.empty()) GTEST_SKIP() << "no table here reads lane panels";
  const Tensor& stored = store->get("int8.weight");
  for (const KernelTable* table : tables) {
    KernelTable row_major_table = *table;
    row_major_table.int8_lane_panels = {};
    const ExecutionContext ctx(cpu_device(), *table), plain_ctx(cpu_device(), row_major_table);
    WeightLoader loader(*store, WeightOptions{}, ctx);  // used as stored: no quantization
    WeightLoader plain_loader(*store, WeightOptions{}, plain_ctx);
    const WeightView packed = loader.matrix("int8.weight", kRows, kCols);
    EXPECT_EQ(loader.weight_bytes(), panels_bytes(*table, 32));
    const WeightView row_major = plain_loader.matrix("int8.weight", kRows, kCols);
    EXPECT_EQ(row_major.data, stored.data);  // in place
    expect_same_bits(*table, packed, row_major);

    // A column-parallel shard's rows, packed on their own: row r of the shard is row 16 + r.
    const WeightView rows = loader.matrix_rows("int8.weight", kRows, kCols, 16, 21);
    ASSERT_NE(rows.lane_panels, nullptr);
    std::vector<float> expected(kCols), actual(kCols);
    for (int64_t r = 0; r < 21; ++r) {
      dequantize_row_reference(row_major, 16 + r, expected.data());
      table->dequantize_row(rows, r, actual.data());
      ASSERT_EQ(actual, expected) << table->isa << " shard row " << r;
    }
    expect_same_bits(*table, rows, plain_loader.matrix_rows("int8.weight", kRows, kCols, 16, 21));

    // A row-parallel shard's columns (one group of 32), cut and packed.
    expect_same_bits(*table, loader.matrix_columns("int8.weight", kRows, kCols, 32, 32),
                     plain_loader.matrix_columns("int8.weight", kRows, kCols, 32, 32));
  }
}

// A device the host cannot write gets the panels packed on the host and copied in: its weight
// bytes are the panels alone, and they multiply as the CPU device's do.
TEST_F(LanePanelWeights, ADeviceTheHostCannotWriteGetsACopyOfThePanels) {
  const std::vector<const KernelTable*> tables = panel_tables();
  if (tables.empty()) GTEST_SKIP() << "no table here reads lane panels";
  for (const KernelTable* table : tables) {
    test::RecordingDevice device(/*host_accessible=*/false);
    const ExecutionContext ctx(device, *table), host_ctx(cpu_device(), *table);
    WeightLoader loader(*store, quantized_at_load(32), ctx);
    WeightLoader host_loader(*store, quantized_at_load(32), host_ctx);
    const WeightView on_device = loader.matrix("float.weight", kRows, kCols);
    const WeightView stored_on_device = loader.matrix("int8.weight", kRows, kCols);
    EXPECT_EQ(loader.weight_bytes(), 2 * panels_bytes(*table, 32));
    EXPECT_EQ(device.bytes(MemoryPurpose::kWeights), static_cast<size_t>(loader.weight_bytes()));
    const WeightView on_host = host_loader.matrix("float.weight", kRows, kCols);
    ASSERT_NE(on_device.lane_panels, nullptr);
    ASSERT_NE(stored_on_device.lane_panels, nullptr);
    for (int64_t tokens : {int64_t{1}, int64_t{7}, kMaxTokens}) {
      std::vector<float> a(tokens * kRows), b(tokens * kRows);
      table->matmul(x.data(), tokens, on_device, 0, kRows, a.data(), kRows);
      table->matmul(x.data(), tokens, on_host, 0, kRows, b.data(), kRows);
      EXPECT_EQ(a, b) << table->isa << " tokens=" << tokens;
    }
  }
}

// int4 quantized at load (zero points), stored int4 with zero points and symmetric (Q4_0's
// form, no mins plane packed), and a stored matrix's row and column shards: packed in place of
// their rows, counted once, and multiplying to the row-major bits on the same table.
TEST_F(LanePanelWeights, Int4IsPackedInPlaceOfItsRows) {
  const std::vector<const KernelTable*> tables = panel_tables(DType::kI4);
  if (tables.empty()) GTEST_SKIP() << "no table here reads int4 lane panels";
  for (const KernelTable* table : tables) {
    KernelTable row_major_table = *table;
    row_major_table.int4_lane_panels = {};
    const ExecutionContext ctx(cpu_device(), *table), plain_ctx(cpu_device(), row_major_table);
    const LanePanelLayout layout = table->int4_lane_panels;
    const auto panels_of = [&](int64_t rows, int64_t cols, int64_t group, int planes) {
      return num_lane_panels(rows, layout) *
             (layout.rows * cols / 2 + layout.rows * (cols / group) * 2 * planes);
    };
    for (int64_t group : {int64_t{32}, int64_t{64}}) {
      WeightLoader loader(*store, quantized_at_load(group, DType::kI4), ctx);
      WeightLoader plain_loader(*store, quantized_at_load(group, DType::kI4), plain_ctx);
      const WeightView packed = loader.matrix("float.weight", kRows, kCols);
      const WeightView row_major = plain_loader.matrix("float.weight", kRows, kCols);
      EXPECT_EQ(packed.data, nullptr);
      EXPECT_EQ(packed.mins, nullptr);
      EXPECT_EQ(loader.weight_bytes(), panels_of(kRows, kCols, group, 2)) << table->isa;
      expect_same_bits(*table, packed, row_major);
    }
    for (const char* name : {"int4.weight", "q4_0.weight"}) {
      const bool symmetric = std::string(name) == "q4_0.weight";
      WeightLoader loader(*store, WeightOptions{}, ctx);
      WeightLoader plain_loader(*store, WeightOptions{}, plain_ctx);
      const WeightView packed = loader.matrix(name, kRows, kCols);
      EXPECT_EQ(packed.symmetric_int4, symmetric) << name;
      EXPECT_EQ(loader.weight_bytes(), panels_of(kRows, kCols, 32, symmetric ? 1 : 2)) << name;
      const WeightView row_major = plain_loader.matrix(name, kRows, kCols);
      EXPECT_EQ(row_major.data, store->get(name).data);  // in place
      expect_same_bits(*table, packed, row_major);
      // Rows 16..36 packed on their own, and columns 32..63 cut and packed.
      const WeightView rows = loader.matrix_rows(name, kRows, kCols, 16, 21);
      ASSERT_NE(rows.lane_panels, nullptr);
      std::vector<float> expected(kCols), actual(kCols);
      for (int64_t r = 0; r < 21; ++r) {
        dequantize_row_reference(row_major, 16 + r, expected.data());
        table->dequantize_row(rows, r, actual.data());
        ASSERT_EQ(actual, expected) << table->isa << " " << name << " shard row " << r;
      }
      expect_same_bits(*table, rows, plain_loader.matrix_rows(name, kRows, kCols, 16, 21));
      expect_same_bits(*table, loader.matrix_columns(name, kRows, kCols, 32, 32),
                       plain_loader.matrix_columns(name, kRows, kCols, 32, 32));
    }
  }
}

TEST_F(LanePanelWeights, OtherTablesAndTablesReadByRowsStayRowMajor) {
  const KernelTable& scalar = *kernels_for("scalar");
  ASSERT_FALSE(scalar.int8_lane_panels);
  ASSERT_FALSE(scalar.int4_lane_panels);
  {
    WeightLoader loader(*store, quantized_at_load(32), ExecutionContext(cpu_device(), scalar));
    EXPECT_EQ(loader.matrix("int8.weight", kRows, kCols).lane_panels, nullptr);
    EXPECT_EQ(loader.matrix("float.weight", kRows, kCols).lane_panels, nullptr);
  }
  for (const KernelTable* table : panel_tables()) {
    // A stored int8 embedding reused as lm_head (prepare) is not held twice.
    WeightLoader loader(*store, WeightOptions{}, ExecutionContext(cpu_device(), *table));
    const WeightView embedding = loader.matrix_as_stored("int8.weight", kRows, kCols);
    EXPECT_EQ(embedding.lane_panels, nullptr);
    const WeightView head = loader.prepare(embedding, "lm_head.weight");
    EXPECT_EQ(head.lane_panels, nullptr) << table->isa;
    EXPECT_EQ(head.data, embedding.data);
    // With fp32 activations (weight-only int8) the table reads rows.
    WeightOptions weight_only = quantized_at_load(32);
    weight_only.int8_activations = false;
    WeightLoader weight_only_loader(*store, weight_only, ExecutionContext(cpu_device(), *table));
    EXPECT_EQ(weight_only_loader.matrix("float.weight", kRows, kCols).lane_panels, nullptr);
  }
}

// A converter's store (GGUF's repacked blocks): `int8.weight` stacked twice in one buffer,
// split into two parts that share it, as gguf_model.cpp splits stacked MoE experts. `buffer`
// says when the store has let go of it.
struct ConverterStore {
  TensorStore store = TensorStore::empty("converted.gguf");
  std::weak_ptr<const void> buffer;
  const uint8_t* values = nullptr;
};

std::unique_ptr<ConverterStore> converter_store(const Tensor& stored) {
  struct Repack {
    std::vector<uint8_t> values;
    std::vector<uint16_t> scales;
  };
  auto repack = std::make_shared<Repack>();
  for (int part = 0; part < 2; ++part) {
    repack->values.insert(repack->values.end(), stored.data, stored.data + kRows * kCols);
    repack->scales.insert(repack->scales.end(), stored.scales, stored.scales + kRows * 2);
  }
  auto out = std::make_unique<ConverterStore>();
  out->buffer = repack;
  out->values = repack->values.data();
  for (int part = 0; part < 2; ++part) {
    Tensor t = stored;
    t.name = "part" + std::to_string(part) + ".weight";
    t.data = repack->values.data() + part * kRows * kCols;
    t.scales = repack->scales.data() + part * kRows * 2;
    out->store.add(t, repack);
  }
  EXPECT_FALSE(out->store.maps_from_file(out->store.get("part0.weight")));
  EXPECT_TRUE(out->store.holds_converted("part0.weight"));
  return out;
}

// Bytes a converter holds in host memory are packed when the store lets go of them
// (WeightOptions::release_converted: the model is its one reader): the buffer is freed once
// its last part is packed, and the parts can no longer be read from the store. Otherwise the
// CPU device uses them in place rather than hold them twice, and a device that copies them in
// anyway takes the panels.
TEST_F(LanePanelWeights, BytesAConverterHoldsArePackedWhenTheStoreLetsGoOfThem) {
  const std::vector<const KernelTable*> tables = panel_tables();
  if (tables.empty()) GTEST_SKIP() << "no table here reads lane panels";
  WeightOptions released;
  released.release_converted = true;
  for (const KernelTable* table : tables) {
    KernelTable row_major_table = *table;
    row_major_table.int8_lane_panels = {};
    WeightLoader plain_loader(*store, WeightOptions{},
                              ExecutionContext(cpu_device(), row_major_table));
    const WeightView row_major = plain_loader.matrix("int8.weight", kRows, kCols);

    const std::unique_ptr<ConverterStore> kept = converter_store(store->get("int8.weight"));
    WeightLoader on_cpu(kept->store, WeightOptions{}, ExecutionContext(cpu_device(), *table));
    const WeightView in_place = on_cpu.matrix("part1.weight", kRows, kCols);
    EXPECT_EQ(in_place.lane_panels, nullptr) << table->isa;
    EXPECT_EQ(in_place.data, kept->values + kRows * kCols);
    EXPECT_FALSE(kept->buffer.expired());
    EXPECT_TRUE(kept->store.holds_converted("part1.weight"));

    const std::unique_ptr<ConverterStore> let_go = converter_store(store->get("int8.weight"));
    WeightLoader loader(let_go->store, released, ExecutionContext(cpu_device(), *table));
    const WeightView first = loader.matrix("part0.weight", kRows, kCols);
    EXPECT_EQ(loader.weight_bytes(), panels_bytes(*table, 32));
    EXPECT_FALSE(let_go->buffer.expired()) << "part1 still reads it";
    test::expect_message(test::error_of([&] { let_go->store.get("part0.weight"); }),
                         {"converted.gguf", "part0.weight", "released"});
    const WeightView second = loader.matrix("part1.weight", kRows, kCols);
    EXPECT_TRUE(let_go->buffer.expired()) << table->isa;
    EXPECT_FALSE(let_go->store.holds_converted("part1.weight"));
    expect_same_bits(*table, first, row_major);
    expect_same_bits(*table, second, row_major);
    // Every row dequantizes as the row-major matrix's does (the embedding path reads rows).
    std::vector<float> expected(kCols), actual(kCols);
    for (int64_t r = 0; r < kRows; ++r) {
      dequantize_row_reference(row_major, r, expected.data());
      table->dequantize_row(second, r, actual.data());
      ASSERT_EQ(actual, expected) << table->isa << " row " << r;
    }

    // A device that copies the bytes in packs them in either case, and lets go where it may.
    for (const bool release : {false, true}) {
      const std::unique_ptr<ConverterStore> copied_store =
          converter_store(store->get("int8.weight"));
      test::RecordingDevice device(/*host_accessible=*/false);
      WeightLoader copied(copied_store->store, release ? released : WeightOptions{},
                          ExecutionContext(device, *table));
      const WeightView packed = copied.matrix("part0.weight", kRows, kCols);
      EXPECT_EQ(copied.weight_bytes(), panels_bytes(*table, 32));
      EXPECT_EQ(copied_store->store.holds_converted("part0.weight"), !release);
      expect_same_bits(*table, packed, row_major);
    }
  }
}

// A tied embedding read through prepare() stays row-major in the store even when the store
// lets go of what is packed: the embedding reads those rows.
TEST_F(LanePanelWeights, ATiedEmbeddingAConverterHoldsStaysInTheStore) {
  if (panel_tables().empty()) GTEST_SKIP() << "no table here reads lane panels";
  WeightOptions released;
  released.release_converted = true;
  for (const KernelTable* table : panel_tables()) {
    const std::unique_ptr<ConverterStore> converted = converter_store(store->get("int8.weight"));
    WeightLoader loader(converted->store, released, ExecutionContext(cpu_device(), *table));
    const WeightView embedding = loader.matrix_as_stored("part0.weight", kRows, kCols);
    const WeightView head = loader.prepare(embedding, "lm_head.weight");
    EXPECT_EQ(head.lane_panels, nullptr) << table->isa;
    EXPECT_EQ(head.data, converted->values);
    EXPECT_TRUE(converted->store.holds_converted("part0.weight"));
    EXPECT_EQ(converted->store.get("part0.weight").data, converted->values);
  }
}

// How many of the whole pages inside [begin, end) are mapped into this process
// (/proc/self/pagemap's present bit; mincore would count a file's pages in the page cache,
// which dropping them from the process leaves there). -1 where pagemap cannot be read.
int64_t present_pages(const void* begin, const void* end) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t first = (reinterpret_cast<uintptr_t>(begin) + page - 1) / page;
  const uintptr_t last = reinterpret_cast<uintptr_t>(end) / page;
  const int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  int64_t present = 0;
  for (uintptr_t p = first; p < last && present >= 0; ++p) {
    uint64_t entry = 0;
    const auto at = static_cast<off_t>(p * sizeof(entry));
    if (::pread(fd, &entry, sizeof(entry), at) != static_cast<ssize_t>(sizeof(entry))) {
      present = -1;
    } else {
      present += static_cast<int64_t>(entry >> 63);
    }
  }
  ::close(fd);
  return present;
}

// True when this process sees a file map's pages leave it once dropped: pagemap is readable
// and madvise drops them (qemu-user may ignore the advice, or show the host's pagemap).
bool drops_are_visible(const test::TempDir& dir) {
  const std::string path = dir.file("probe.bin");
  std::ofstream(path, std::ios::binary) << std::string(8 * 4096, 'x');
  const MappedFile probe(path);
  int64_t sum = 0;
  for (size_t i = 0; i < probe.size(); i += 4096) sum += probe.data()[i];
  const uint8_t* end = probe.data() + probe.size();
  if (sum == 0 || present_pages(probe.data(), end) <= 0) return false;
  probe.drop_pages(probe.data(), end);
  return present_pages(probe.data(), end) == 0;
}

// A stored int8 or int4 matrix from a file map larger than a packing step (8 MiB: 4096 int8
// rows or 8192 int4 rows of 2048 columns) is packed a step at a time, each step's file pages
// dropped as it is done: the panels are the bytes the whole matrix packs into (the last panel
// padded), and afterwards none of its values', scales' or mins' whole pages are mapped in (they
// stay in the page cache, out of the process). int4 runs where a table reads int4 panels
// (AArch64, under qemu here).
TEST(LanePanelWeightsFromAMap, AMatrixLargerThanAPackingStepIsPackedStepByStepAndDropped) {
  if (panel_tables().empty()) GTEST_SKIP() << "no table here reads lane panels";
  constexpr int64_t kBigCols = 2048, kGroups = kBigCols / 32;
  const test::TempDir probe_dir;
  const bool visible = drops_are_visible(probe_dir);
  if (!visible) std::printf("dropped pages are not visible here: checking the panels only\n");
  for (const DType dtype : {DType::kI8, DType::kI4}) {
    const std::vector<const KernelTable*> tables = panel_tables(dtype);
    if (tables.empty()) {
      std::printf("no table here reads %s lane panels\n", dtype_name(dtype));
      continue;
    }
    const bool int4 = dtype == DType::kI4;
    const int64_t big_rows = int4 ? 8192 + 40 : 4096 + 20;
    const int64_t value_bytes = big_rows * dtype_row_bytes(dtype, kBigCols);
    std::mt19937 rng(11);
    std::vector<int8_t> values(static_cast<size_t>(value_bytes));
    for (int8_t& v : values) v = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
    std::vector<uint16_t> scales(big_rows * kGroups), mins(big_rows * kGroups);
    for (uint16_t& s : scales) s = f32_to_f16(0.001f * static_cast<float>(1 + rng() % 100));
    for (uint16_t& m : mins) m = f32_to_f16(-0.001f * static_cast<float>(rng() % 800));
    const test::TempDir dir;
    std::vector<TensorBytes> tensors = {
        {{"big.weight", int4 ? "U8" : "I8", {big_rows, int4 ? kBigCols / 2 : kBigCols}},
         bytes_of(values)},
        {{"big.weight_scale", "F16", {big_rows, kGroups}}, bytes_of(scales)}};
    if (int4) tensors.push_back({{"big.weight_min", "F16", {big_rows, kGroups}}, bytes_of(mins)});
    write_safetensors(dir.file("model.safetensors"), tensors);
    const TensorStore store = TensorStore::open(dir.str());  // mapped
    const Tensor& stored = store.get("big.weight");
    const WeightView view{stored.data,   dtype,       big_rows, kBigCols,
                          stored.scales, stored.mins, 32,       /*int8_activations=*/true};
    const uint8_t* values_end = stored.data + value_bytes;
    const auto plane_end = [&](const uint16_t* plane) {
      return reinterpret_cast<const uint8_t*>(plane + big_rows * kGroups);
    };
    for (const KernelTable* table : tables) {
      SCOPED_TRACE(std::string(table->isa) + " " + dtype_name(dtype));
      int64_t sum = 0;  // every page read in, as a forward pass would
      for (const uint8_t* p = stored.data; p < values_end; p += 4096) sum += *p;
      for (const uint16_t* plane : {stored.scales, stored.mins}) {
        if (plane == nullptr) continue;
        for (const auto* p = reinterpret_cast<const uint8_t*>(plane); p < plane_end(plane);
             p += 4096)
          sum += *p;
      }
      EXPECT_NE(sum, -1);
      if (visible) {
        EXPECT_GT(present_pages(stored.data, values_end), 0);
      }

      WeightLoader loader(store, WeightOptions{}, ExecutionContext(cpu_device(), *table));
      const WeightView packed = loader.matrix("big.weight", big_rows, kBigCols);
      ASSERT_NE(packed.lane_panels, nullptr);
      if (visible) {
        EXPECT_EQ(present_pages(stored.data, values_end), 0);
        EXPECT_EQ(present_pages(stored.scales, plane_end(stored.scales)), 0);
        if (int4) {
          EXPECT_EQ(present_pages(stored.mins, plane_end(stored.mins)), 0);
        }
      }
      // (This reads the pages back in, from the page cache.)
      const LanePanels whole = pack_lane_panels(view, table->lane_panel_layout(dtype));
      ASSERT_EQ(loader.weight_bytes(), whole.size_bytes);
      EXPECT_EQ(
          std::memcmp(packed.lane_panels, whole.bytes.get(), static_cast<size_t>(whole.size_bytes)),
          0);
    }
  }
}

}  // namespace
}  // namespace pagoda
