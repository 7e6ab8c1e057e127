// FP8 checkpoints end to end: a generated model rewritten as DeepSeek-V3's block-scaled e4m3
// layout (model/fp8_model_writer.h) and loaded with --fp8-weights dequant gives the same logits
// as the same weights dequantized by the test (from the format's definition) and written as
// f32; int8 and int4 conversions stay close to it. Llama (partial edge blocks in the MLP) and
// DeepSeek-V3 (MLA's 576-row kv_a_proj_with_mqa, MoE experts).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../loader/e4m3_reference.h"
#include "../loader/test_helpers.h"
#include "demo/model_generator.h"
#include "kernels/host_context.h"
#include "loader/safetensors.h"
#include "loader/safetensors_writer.h"
#include "model/fp8_model_writer.h"
#include "model/logit_divergence.h"
#include "model/model_config.h"
#include "model/model_registry.h"

namespace pagoda {
namespace {

ModelSpec llama_spec() {
  ModelSpec spec;
  spec.dtype = DType::kF32;  // so the tensors left unquantized are f32 in both models
  spec.hidden_size = 128;
  spec.intermediate_size = 320;  // 3 column blocks of gate/up rows, the last half full
  spec.num_layers = 2;
  spec.num_heads = 4;
  spec.num_kv_heads = 2;
  spec.vocab_size = 512;
  spec.seed = 11;
  return spec;
}

ModelSpec deepseek_v3_spec() {
  ModelSpec spec = model_preset("deepseek-v3");
  spec.dtype = DType::kF32;
  spec.hidden_size = 256;
  spec.intermediate_size = 320;
  spec.num_layers = 2;
  spec.num_heads = 2;
  spec.num_kv_heads = 2;
  spec.vocab_size = 512;
  spec.max_position_embeddings = 512;
  spec.rope_scaling = nullptr;
  spec.seed = 12;
  DeepseekSpec& d = spec.deepseek;
  d.q_lora_rank = 192;
  d.kv_lora_rank = 512;  // kv_a_proj_with_mqa: 512 + 64 = 576 rows, a [5, 2] scale grid
  d.qk_nope_head_dim = 32;
  d.qk_rope_head_dim = 64;
  d.v_head_dim = 32;
  d.n_routed_experts = 4;
  d.n_shared_experts = 1;
  d.num_experts_per_tok = 2;
  d.moe_intermediate_size = 128;
  d.first_k_dense_replace = 1;
  d.n_group = 1;
  d.topk_group = 1;
  d.num_nextn_predict_layers = 0;
  return spec;
}

// The FP8 checkpoint's weights dequantized here, independently of the loader, and written as
// f32 over a copy of the model generated again (same config and tokenizer, no FP8 config).
std::string dequantized_reference(const std::string& fp8_dir, ModelSpec spec,
                                  const std::string& out) {
  spec.num_shards = 1;
  const std::string dir = generate_model(spec, out).dir;
  const TensorStore fp8 =
      TensorStore::open(fp8_dir, FileMemory::kMap, nullptr, nullptr, Fp8Weights::kAsStored);
  std::vector<TensorBytes> tensors;
  for (const auto& [name, t] : fp8.tensors()) {
    if (name.ends_with("_scale_inv")) continue;
    std::vector<float> values(static_cast<size_t>(t.num_elements()));
    if (t.stored_dtype == "F8_E4M3") {
      const Tensor* scale = fp8.find(name + "_scale_inv");
      EXPECT_NE(scale, nullptr) << name;
      const int64_t cols = t.shape[1], grid_cols = (cols + 127) / 128;
      for (int64_t i = 0; i < t.num_elements(); ++i) {
        const float s = scale->data_as<float>()[(i / cols / 128) * grid_cols + (i % cols) / 128];
        values[static_cast<size_t>(i)] = static_cast<float>(test::e4m3_definition(t.data[i])) * s;
      }
    } else {
      EXPECT_EQ(t.stored_dtype, "F32") << name;
      std::memcpy(values.data(), t.data, static_cast<size_t>(t.size_bytes));
    }
    TensorBytes b{{name, "F32", t.shape}, std::vector<uint8_t>(values.size() * sizeof(float))};
    std::memcpy(b.bytes.data(), values.data(), b.bytes.size());
    tensors.push_back(std::move(b));
  }
  write_safetensors(dir + "/model.safetensors", tensors);
  return dir;
}

std::vector<int32_t> some_tokens(int64_t n, int64_t vocab) {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(static_cast<int32_t>((i * 37 + 11) % vocab));
  return t;
}

void check_model(ModelSpec spec, int64_t expected_fp8_matrices) {
  test::TempDir tmp;
  spec.num_shards = 2;  // the index gains the scale tensors
  const std::string fp8_dir = generate_model(spec, tmp.file("fp8")).dir;
  const Fp8WriteResult written = write_fp8_model(fp8_dir);
  EXPECT_EQ(written.num_matrices, expected_fp8_matrices);
  const std::string ref_dir = dequantized_reference(fp8_dir, spec, tmp.file("ref"));

  const ModelConfig config = ModelConfig::from_dir(fp8_dir);
  const TensorStore ref_store = TensorStore::open(ref_dir);
  const auto reference = create_model(host_execution_context(), ModelConfig::from_dir(ref_dir),
                                      ref_store, ModelOptions{});
  const auto tokens = some_tokens(64, config.vocab_size);

  const TensorStore dequant_store =
      TensorStore::open(fp8_dir, FileMemory::kMap, nullptr, nullptr, Fp8Weights::kDequant);
  const auto dequant =
      create_model(host_execution_context(), config, dequant_store, ModelOptions{});
  const LogitDivergence same = compare_next_token_distributions(*reference, *dequant, tokens);
  EXPECT_EQ(same.mean_abs_logit_diff, 0.0) << "dequant must be the f32 model exactly";
  EXPECT_EQ(same.max_kl, 0.0);

  // Bounds: the measured mean KL (printed below) with room for other ISAs' rounding. Llama:
  // int8 3.4e-4, int4 1.7e-2. The random MoE model drifts more (int8 1.0e-2, int4 6.9e-2):
  // a router's near-tie flips to another expert on small weight changes.
  const bool moe = spec.is_deepseek();
  const struct {
    Fp8Weights mode;
    double max_mean_kl;
  } cases[] = {{Fp8Weights::kInt8, moe ? 3e-2 : 2e-3}, {Fp8Weights::kInt4, moe ? 2e-1 : 8e-2}};
  for (const auto& c : cases) {
    const TensorStore store =
        TensorStore::open(fp8_dir, FileMemory::kMap, nullptr, nullptr, c.mode);
    const auto candidate = create_model(host_execution_context(), config, store, ModelOptions{});
    const LogitDivergence d = compare_next_token_distributions(*reference, *candidate, tokens);
    EXPECT_LT(d.mean_kl, c.max_mean_kl) << fp8_weights_name(c.mode);
    EXPECT_GT(d.mean_kl, 0.0) << "a conversion that changes nothing is suspicious";
    EXPECT_LT(candidate->weight_bytes(), dequant->weight_bytes());
    std::printf("[ %s fp8 as %s ] mean KL %.3g, max %.3g, top-1 agreement %.3f\n",
                spec.architecture.c_str(), fp8_weights_name(c.mode), d.mean_kl, d.max_kl,
                d.top1_agreement);
  }
}

TEST(Fp8Model, LlamaDequantIsExactAndPanelsAreClose) {
  check_model(llama_spec(), 2 * 7);
}

TEST(Fp8Model, DeepseekV3DequantIsExactAndPanelsAreClose) {
  // Layer 0 dense: q_a, q_b, kv_a, kv_b, o + gate/up/down; layer 1 MoE: the same attention, 4
  // experts and 1 shared expert of 3 matrices each.
  check_model(deepseek_v3_spec(), 5 + 3 + 5 + 5 * 3);
}

TEST(Fp8Model, WriterAnnouncesDeepseeksConfig) {
  test::TempDir tmp;
  const std::string dir = generate_model(llama_spec(), tmp.file("m")).dir;
  write_fp8_model(dir);
  std::ifstream in(dir + "/config.json");
  const nlohmann::json qc = nlohmann::json::parse(in)["quantization_config"];
  EXPECT_EQ(qc["quant_method"], "fp8");
  EXPECT_EQ(qc["fmt"], "e4m3");
  EXPECT_EQ(qc["activation_scheme"], "dynamic");
  EXPECT_EQ(qc["weight_block_size"], nlohmann::json::array({128, 128}));
  const TensorStore store =
      TensorStore::open(dir, FileMemory::kMap, nullptr, nullptr, Fp8Weights::kAsStored);
  EXPECT_EQ(store.find("model.layers.0.mlp.down_proj.weight")->stored_dtype, "F8_E4M3");
  EXPECT_EQ(store.find("model.layers.0.mlp.down_proj.weight_scale_inv")->shape,
            (std::vector<int64_t>{1, 3}));  // [128, 320]: ceil(128/128) x ceil(320/128)
  EXPECT_EQ(store.find("model.embed_tokens.weight")->stored_dtype, "F32");
}

}  // namespace
}  // namespace pagoda
