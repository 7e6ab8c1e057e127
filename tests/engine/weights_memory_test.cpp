// --weights-memory auto (engine/weights_memory.h): weights used as stored are copied into huge
// pages; files read once (quantized at load, GGUF, FP8, and Pagoda's int8 checkpoints on a
// table that packs their lane panels) are mapped; a tensor-parallel rank maps; an explicit
// choice wins. The checkpoints are directories with only a config.json, which is all the
// decision reads; the tables are the scalar one with and without int8 / int4 panel layouts,
// so that every kind is decided on every CPU.
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "../loader/test_helpers.h"
#include "engine/weights_memory.h"
#include "kernels/kernels.h"

namespace pagoda {
namespace {

struct Checkpoints {
  test::TempDir float_dir, int8_dir, int4_dir, fp8_dir;
  Checkpoints() {
    std::ofstream(float_dir.file("config.json")) << R"({"model_type": "llama"})";
    std::ofstream(int8_dir.file("config.json"))
        << R"({"quantization_config": {"quant_method": "pagoda", "weight_type": "int8",
                "group_size": -1, "num_quantized_matrices": 29}})";
    std::ofstream(int4_dir.file("config.json"))
        << R"({"quantization_config": {"quant_method": "pagoda", "weight_type": "int4",
                "group_size": 32, "num_quantized_matrices": 29}})";
    std::ofstream(fp8_dir.file("config.json"))
        << R"({"quantization_config": {"quant_method": "fp8", "fmt": "e4m3"}})";
  }
};

// A table that reads row-major int8, and one that reads int8 in lane panels (x86 avx2's
// layout; which one does not matter to the decision).
KernelTable row_major_table() {
  KernelTable t = *kernels_for("scalar");
  t.int8_lane_panels = LanePanelLayout{};
  return t;
}
KernelTable panel_table() {
  KernelTable t = *kernels_for("scalar");
  t.int8_lane_panels = LanePanelLayout{16, 2};
  return t;
}
// One that reads int8 and int4 in lane panels (AArch64 neon_dotprod's 4 x 4).
KernelTable int4_panel_table() {
  KernelTable t = *kernels_for("scalar");
  t.int8_lane_panels = LanePanelLayout{4, 4};
  t.int4_lane_panels = LanePanelLayout{4, 4};
  return t;
}

EngineArgs args_with(const std::string& weights_memory) {
  EngineArgs args;
  args.weights_memory = weights_memory;
  return args;
}

TEST(WeightsMemory, APagodaInt8CheckpointIsMappedWhenTheTablePacksInt8Panels) {
  const Checkpoints c;
  const EngineArgs automatic = args_with("auto");
  EXPECT_EQ(weights_memory_for(automatic, c.int8_dir.str(), panel_table()), FileMemory::kMap);
  // A row-major table computes with the stored bytes all run long: into huge pages.
  EXPECT_EQ(weights_memory_for(automatic, c.int8_dir.str(), row_major_table()),
            FileMemory::kHugePageCopy);
  // Weight-only quantization widens int8 instead; the loader packs nothing.
  EngineArgs weight_only = automatic;
  weight_only.int8_activations = false;
  EXPECT_EQ(weights_memory_for(weight_only, c.int8_dir.str(), panel_table()),
            FileMemory::kHugePageCopy);
}

TEST(WeightsMemory, FloatAndInt4CheckpointsUsedAsStoredGoIntoHugePagesOnEitherTable) {
  const Checkpoints c;
  const EngineArgs automatic = args_with("auto");
  for (const KernelTable& table : {row_major_table(), panel_table()}) {
    SCOPED_TRACE(table.int8_lane_panels ? "int8 panels" : "row-major int8");
    EXPECT_EQ(weights_memory_for(automatic, c.float_dir.str(), table), FileMemory::kHugePageCopy);
    // Neither table packs int4: Pagoda's int4 checkpoints are used as stored.
    EXPECT_EQ(weights_memory_for(automatic, c.int4_dir.str(), table), FileMemory::kHugePageCopy);
  }
}

TEST(WeightsMemory, APagodaInt4CheckpointIsMappedWhenTheTablePacksInt4Panels) {
  const Checkpoints c;
  const EngineArgs automatic = args_with("auto");
  EXPECT_EQ(weights_memory_for(automatic, c.int4_dir.str(), int4_panel_table()), FileMemory::kMap);
  EXPECT_EQ(weights_memory_for(automatic, c.int8_dir.str(), int4_panel_table()), FileMemory::kMap);
  EXPECT_EQ(weights_memory_for(automatic, c.float_dir.str(), int4_panel_table()),
            FileMemory::kHugePageCopy);
  EngineArgs weight_only = automatic;
  weight_only.int8_activations = false;
  EXPECT_EQ(weights_memory_for(weight_only, c.int4_dir.str(), int4_panel_table()),
            FileMemory::kHugePageCopy);
}

TEST(WeightsMemory, FilesReadOnceAndTensorParallelRanksAreMappedOnEitherTable) {
  const Checkpoints c;
  for (const KernelTable& table : {row_major_table(), panel_table()}) {
    SCOPED_TRACE(table.int8_lane_panels ? "int8 panels" : "row-major int8");
    EngineArgs quantized = args_with("auto");
    quantized.quantization = "int8";
    EXPECT_EQ(weights_memory_for(quantized, c.float_dir.str(), table), FileMemory::kMap);
    quantized.quantization = "int4";
    EXPECT_EQ(weights_memory_for(quantized, c.float_dir.str(), table), FileMemory::kMap);
    const EngineArgs automatic = args_with("auto");
    EXPECT_EQ(weights_memory_for(automatic, c.fp8_dir.str(), table), FileMemory::kMap);
    EXPECT_EQ(weights_memory_for(automatic, c.float_dir.file("model.gguf"), table),
              FileMemory::kMap);
    EngineArgs rank = args_with("auto");
    rank.tensor_parallel_size = 2;
    EXPECT_EQ(weights_memory_for(rank, c.float_dir.str(), table), FileMemory::kMap);
  }
}

TEST(WeightsMemory, AnExplicitChoiceWins) {
  const Checkpoints c;
  for (const KernelTable& table : {row_major_table(), panel_table()}) {
    for (const std::string& dir : {c.float_dir.str(), c.int8_dir.str(), c.int4_dir.str()}) {
      EXPECT_EQ(weights_memory_for(args_with("mmap"), dir, table), FileMemory::kMap);
      EXPECT_EQ(weights_memory_for(args_with("huge-pages"), dir, table), FileMemory::kHugePageCopy);
    }
  }
  const std::string message = test::error_of(
      [&] { weights_memory_for(args_with("copy"), c.int8_dir.str(), panel_table()); });
  EXPECT_NE(message.find("'copy'"), std::string::npos) << message;
}

// The predicate follows the table's panel layouts, for every table this CPU runs (x86: avx2
// and avx512 without VNNI pack int8; AArch64: neon_dotprod, neon_i8mm and their successors
// pack int8 and int4).
TEST(WeightsMemory, TablesPackStoredInt8AndInt4ExactlyWhenTheyReadTheirPanels) {
  EXPECT_TRUE(packs_stored_matrices(panel_table(), DType::kI8));
  EXPECT_FALSE(packs_stored_matrices(panel_table(), DType::kI4));
  EXPECT_FALSE(packs_stored_matrices(row_major_table(), DType::kI8));
  EXPECT_TRUE(packs_stored_matrices(int4_panel_table(), DType::kI4));
  for (const std::string& isa : kernel_isa_names()) {
    const KernelTable* table = kernels_for(isa);
    if (table == nullptr) continue;  // this CPU cannot run it
    SCOPED_TRACE(isa);
    EXPECT_EQ(packs_stored_matrices(*table, DType::kI8),
              static_cast<bool>(table->int8_lane_panels));
    EXPECT_EQ(packs_stored_matrices(*table, DType::kI4),
              static_cast<bool>(table->int4_lane_panels));
    for (DType f : {DType::kF32, DType::kF16, DType::kBF16}) {
      EXPECT_FALSE(packs_stored_matrices(*table, f));
    }
  }
#if defined(__x86_64__)
  if (const KernelTable* avx2 = kernels_for("avx2"); avx2 != nullptr) {
    EXPECT_TRUE(packs_stored_matrices(*avx2, DType::kI8));  // the 16 x 2 panels
  }
#endif
}

}  // namespace
}  // namespace pagoda
