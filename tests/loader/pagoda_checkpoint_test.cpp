// pagoda_checkpoint_weight_type: what config.json says `pagoda quantize` stored, read before the
// weight files are opened; anything else, broken or not, is "not a Pagoda checkpoint".
#include <fstream>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "loader/pagoda_checkpoint.h"
#include "test_helpers.h"

namespace pagoda {
namespace {

// A directory holding only config.json with `text`.
std::optional<DType> weight_type_of(const std::string& text) {
  const test::TempDir dir;
  std::ofstream(dir.file("config.json")) << text;
  return pagoda_checkpoint_weight_type(dir.str());
}

TEST(PagodaCheckpoint, ItsWeightTypeIsWhatPagodaQuantizeWrote) {
  EXPECT_EQ(weight_type_of(R"({"quantization_config": {"quant_method": "pagoda",
      "weight_type": "int8", "group_size": -1, "num_quantized_matrices": 29}})"),
            DType::kI8);
  EXPECT_EQ(weight_type_of(R"({"quantization_config": {"quant_method": "pagoda",
      "weight_type": "int4", "group_size": 32}})"),
            DType::kI4);
}

TEST(PagodaCheckpoint, OtherCheckpointsAndBrokenConfigsAreNone) {
  EXPECT_EQ(weight_type_of(R"({"model_type": "llama"})"), std::nullopt);  // float
  EXPECT_EQ(weight_type_of(R"({"quantization_config": {"quant_method": "fp8"}})"), std::nullopt);
  EXPECT_EQ(weight_type_of(R"({"quantization_config": {"quant_method": "gptq", "bits": 4}})"),
            std::nullopt);
  // Pagoda's, but a weight type this build does not know, or none.
  EXPECT_EQ(weight_type_of(R"({"quantization_config": {"quant_method": "pagoda",
      "weight_type": "int2"}})"),
            std::nullopt);
  EXPECT_EQ(weight_type_of(R"({"quantization_config": {"quant_method": "pagoda"}})"), std::nullopt);
  // Keys of the wrong JSON type, not JSON at all: the loader names those when it opens the model.
  EXPECT_EQ(weight_type_of(R"({"quantization_config": {"quant_method": "pagoda",
      "weight_type": 8}})"),
            std::nullopt);
  EXPECT_EQ(weight_type_of(R"({"quantization_config": {"quant_method": ["pagoda"]}})"),
            std::nullopt);
  EXPECT_EQ(weight_type_of(R"({"quantization_config": "pagoda"})"), std::nullopt);
  EXPECT_EQ(weight_type_of("{not json"), std::nullopt);

  const test::TempDir empty;  // no config.json: a single file's directory, or a GGUF path
  EXPECT_EQ(pagoda_checkpoint_weight_type(empty.str()), std::nullopt);
  EXPECT_EQ(pagoda_checkpoint_weight_type(empty.file("model.gguf")), std::nullopt);
}

}  // namespace
}  // namespace pagoda
