// describe_weight_format: each stored format named as `pagoda info` prints it, only weight
// matrices counted, shares of a mix largest first.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "loader/safetensors.h"
#include "loader/weight_format.h"

namespace pagoda {
namespace {

// A tensor with no bytes behind it: only the header fields matter here.
Tensor tensor(const std::string& name, const std::string& stored, std::vector<int64_t> shape,
              DType dtype = DType::kF32, int64_t group_size = 0) {
  Tensor t;
  t.name = name;
  t.stored_dtype = stored;
  t.shape = std::move(shape);
  t.dtype = dtype;
  t.dtype_supported = true;
  t.group_size = group_size;
  return t;
}

TEST(WeightFormat, AFloatModelIsOneFormatAndItsNormsDoNotCount) {
  TensorStore store = TensorStore::empty("m");
  store.add(tensor("a.weight", "BF16", {64, 64}, DType::kBF16), nullptr);
  store.add(tensor("a.norm.weight", "F32", {64}), nullptr);  // a vector: not a matrix
  EXPECT_EQ(describe_weight_format(store), "bf16");
}

TEST(WeightFormat, QuantizedFormatsNameTheirGroups) {
  TensorStore pagoda_int4 = TensorStore::empty("m");
  pagoda_int4.add(tensor("a.weight", "U8", {64, 64}, DType::kI4, 32), nullptr);
  EXPECT_EQ(describe_weight_format(pagoda_int4), "int4 (group 32)");

  TensorStore gptq = TensorStore::empty("m");
  gptq.add(tensor("a.weight", "GPTQ", {96, 128}, DType::kI4, 128), nullptr);
  gptq.add(tensor("a.qweight", "I32", {16, 96}), nullptr);  // the packed source: not counted
  gptq.add(tensor("embed.weight", "F16", {4, 128}, DType::kF16), nullptr);
  EXPECT_EQ(describe_weight_format(gptq), "GPTQ int4 (group 128) 96%, f16 4%");
}

TEST(WeightFormat, AGgufMixGivesEachGgmlTypeItsShare) {
  TensorStore store = TensorStore::empty("m.gguf");
  store.add(tensor("a.weight", "Q4_K", {81, 100}, DType::kI4, 32), nullptr);
  store.add(tensor("b.weight", "Q6_K", {19, 100}, DType::kI8, 32), nullptr);
  store.add(tensor("c.weight", "F32", {1, 10}), nullptr);
  EXPECT_EQ(describe_weight_format(store), "Q4_K 81%, Q6_K 19%, f32 <1%");
  EXPECT_EQ(describe_weight_format(TensorStore::empty("none")), "none");
}

}  // namespace
}  // namespace pagoda
