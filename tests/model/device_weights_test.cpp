// Every weight byte a model computes with comes from its execution context's device: a tiny
// Llama and a tiny DeepSeek-V3 load onto a device with memory of its own (RecordingDevice:
// the checkpoint's tensors are copied in, not used in place), the checkpoint is closed, and
// greedy decoding must still give the CPU device's tokens. The device's weight bytes must equal
// what the model reports, and its KV bytes the pool's size.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "../loader/test_helpers.h"
#include "demo/model_generator.h"
#include "device/cpu_device.h"
#include "kernels/host_context.h"
#include "kernels/kernels.h"
#include "loader/safetensors.h"
#include "model/model_config.h"
#include "model/model_registry.h"
#include "recording_device.h"

namespace pagoda {
namespace {

constexpr int32_t kBlockSize = 16;
constexpr int32_t kNumBlocks = 4;

// A model's paged KV pool in `device` memory.
struct DeviceKvCache {
  DeviceKvCache(Device& device, const Model& model)
      : spec(model.kv_cache_spec()),
        memory(device.allocate(
            static_cast<size_t>(KvCache::bytes_needed(spec, kNumBlocks, kBlockSize)),
            AllocationOptions{.purpose = MemoryPurpose::kKvCache})),
        cache(spec, kNumBlocks, kBlockSize, memory.data()) {}
  KvCacheSpec spec;
  DeviceBuffer memory;
  KvCache cache;
};

// The prompt, then `steps` tokens each the argmax of the last logits: one prefill, then one
// decode step per token.
std::vector<int32_t> greedy_tokens(Model& model, const ExecutionContext& ctx, KvCache& cache,
                                   std::vector<int32_t> tokens, int steps) {
  std::vector<int32_t> block_table(kNumBlocks);
  for (int32_t b = 0; b < kNumBlocks; ++b) block_table[static_cast<size_t>(b)] = b;
  std::vector<float> logits(static_cast<size_t>(model.vocab_size()));
  int32_t computed = 0;
  for (int step = 0; step < steps; ++step) {
    const auto total = static_cast<int32_t>(tokens.size());
    ForwardBatch batch;
    for (int32_t p = computed; p < total; ++p) {
      batch.token_ids.push_back(tokens[static_cast<size_t>(p)]);
      batch.positions.push_back(p);
      batch.slot_mapping.push_back(p);  // block b holds positions [16b, 16b + 16)
    }
    ForwardSequence seq;
    seq.token_begin = 0;
    seq.num_tokens = total - computed;
    seq.context_len = total;
    seq.block_table = block_table.data();
    seq.needs_logits = true;
    batch.sequences.push_back(seq);
    model.forward(ctx, batch, cache, logits.data());
    computed = total;
    tokens.push_back(
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
  }
  return tokens;
}

// The same model on the CPU device and on a device that copies the checkpoint in, both with
// `kernels` (nullptr: this CPU's table).
void expect_same_tokens_on_a_device_of_its_own(const std::string& preset,
                                               const ModelOptions& options, bool host_accessible,
                                               const KernelTable* kernels = nullptr) {
  test::TempDir dir;
  generate_model(model_preset(preset), dir.str());
  const ModelConfig config = ModelConfig::from_dir(dir.str());
  const std::vector<int32_t> prompt = {1, 17, 42, 99, 7, 300, 5};
  constexpr int kSteps = 12;

  const TensorStore host_store = TensorStore::open(dir.str());
  const ExecutionContext host(cpu_device(), kernels != nullptr ? *kernels : pagoda::kernels());
  const auto host_model = create_model(host, config, host_store, options);
  DeviceKvCache host_cache(host.device(), *host_model);
  const std::vector<int32_t> want =
      greedy_tokens(*host_model, host, host_cache.cache, prompt, kSteps);

  test::RecordingDevice device(host_accessible);
  const ExecutionContext ctx(device, host.kernels());
  std::unique_ptr<Model> model;
  {
    const TensorStore store = TensorStore::open(dir.str());
    model = create_model(ctx, config, store, options);
  }  // the checkpoint is unmapped: the model holds only device memory now
  EXPECT_EQ(device.bytes(MemoryPurpose::kWeights), static_cast<size_t>(model->weight_bytes()));
  EXPECT_EQ(model->weight_bytes(), host_model->weight_bytes());
  EXPECT_EQ(device.bytes(MemoryPurpose::kKvCache), 0u);

  DeviceKvCache cache(device, *model);
  EXPECT_EQ(device.bytes(MemoryPurpose::kKvCache),
            static_cast<size_t>(KvCache::bytes_needed(cache.spec, kNumBlocks, kBlockSize)));
  EXPECT_EQ(greedy_tokens(*model, ctx, cache.cache, prompt, kSteps), want);
  EXPECT_GT(device.bytes(MemoryPurpose::kActivations), 0u);
  EXPECT_EQ(device.memory_usage().allocated_bytes, device.bytes(MemoryPurpose::kWeights) +
                                                       device.bytes(MemoryPurpose::kKvCache) +
                                                       device.bytes(MemoryPurpose::kActivations));
}

TEST(DeviceWeights, TinyLlamaRunsFromDeviceMemoryAlone) {
  expect_same_tokens_on_a_device_of_its_own("tiny", ModelOptions{}, /*host_accessible=*/true);
}

// Quantized at load on a device the host cannot write: each matrix is quantized on the host and
// copied in.
TEST(DeviceWeights, TinyLlamaQuantizedAtLoadIsCopiedIntoADiscreteDevice) {
  ModelOptions options;
  options.weights.quantize_to = DType::kI8;
  expect_same_tokens_on_a_device_of_its_own("tiny", options, /*host_accessible=*/false);
}

// On the tables that read int8 as lane panels (avx2; avx512 without VNNI) the panels are packed
// on the host and copied in like every other converted weight; the tiny DeepSeek-V3 adds MLA
// and the MoE experts.
TEST(DeviceWeights, LanePanelsPackedAtLoadAreCopiedIntoADiscreteDevice) {
  const KernelTable* avx2 = kernels_for("avx2");
  if (avx2 == nullptr) GTEST_SKIP() << "no avx2 table on this CPU";
  ASSERT_TRUE(avx2->int8_lane_panels);
  ModelOptions options;
  options.weights.quantize_to = DType::kI8;
  expect_same_tokens_on_a_device_of_its_own("tiny", options, /*host_accessible=*/false, avx2);
  expect_same_tokens_on_a_device_of_its_own("tiny-deepseek-v3", options,
                                            /*host_accessible=*/false, avx2);
}

TEST(DeviceWeights, TinyDeepseekV3RunsFromDeviceMemoryAlone) {
  expect_same_tokens_on_a_device_of_its_own("tiny-deepseek-v3", ModelOptions{},
                                            /*host_accessible=*/true);
}

// On the CPU device a checkpoint's tensors are used in place: mapped, not copied.
TEST(DeviceWeights, TheCpuDeviceMapsTheCheckpointInPlace) {
  test::TempDir dir;
  generate_model(model_preset("tiny"), dir.str());
  const TensorStore store = TensorStore::open(dir.str());
  const size_t mapped_before = cpu_device().memory_usage().host_mapped_bytes;
  {
    const auto model = create_model(host_execution_context(), ModelConfig::from_dir(dir.str()),
                                    store, ModelOptions{});
    // Everything but the norms, which are widened to fp32 copies of their own.
    const size_t mapped = cpu_device().memory_usage().host_mapped_bytes - mapped_before;
    EXPECT_GT(mapped, 0u);
    EXPECT_LT(mapped, static_cast<size_t>(model->weight_bytes()));
  }
  EXPECT_EQ(cpu_device().memory_usage().host_mapped_bytes, mapped_before);
}

// A device out of memory fails the load with an error that names the tensor.
TEST(DeviceWeights, AnAllocationFailureNamesTheTensor) {
  test::TempDir dir;
  generate_model(model_preset("tiny"), dir.str());
  const ModelConfig config = ModelConfig::from_dir(dir.str());
  const TensorStore store = TensorStore::open(dir.str());
  test::RecordingDevice device;
  device.fail_weight_allocation(0);
  const ExecutionContext ctx(device, host_execution_context().kernels());
  try {
    (void)create_model(ctx, config, store, ModelOptions{});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.embed_tokens.weight"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("recording device: out of memory"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(device.bytes(MemoryPurpose::kWeights), 0u);  // nothing left behind
}

}  // namespace
}  // namespace pagoda
