// The expanded form of MLA prefill (K/V decompressed per step, multi-head attention tiles)
// against the weight-absorbed form on tiny generated DeepSeek-V2 and V3 models: the same
// logits up to fp32 rounding, in batches that mix both forms, over contexts read back from the
// paged latent cache (chunked prefill), and with the heads expanded in groups.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/paged_forward.h"
#include "common/tiny_specs.h"
#include "demo/model_generator.h"
#include "kernels/host_context.h"
#include "loader/safetensors.h"
#include "model/kv_cache.h"
#include "model/model_config.h"
#include "model/model_registry.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;

constexpr int32_t kBlockSize = 4;  // small, so contexts span many blocks

// The tests' tiny DeepSeek (common/tiny_specs.h) with fp32 weights and shared experts of 64
// rows in V3 too.
ModelSpec tiny_spec(const std::string& architecture) {
  ModelSpec spec = test::tiny_deepseek_spec(architecture);
  spec.num_kv_heads = 4;
  spec.max_position_embeddings = 256;
  spec.dtype = DType::kF32;
  spec.seed = 11;
  spec.deepseek.moe_intermediate_size = 64;
  return spec;
}

// Runs one model over a fixed schedule of steps through its own paged cache, with blocks handed
// out in reverse so that logical order never equals physical order.
class Runner {
 public:
  Runner(const std::string& dir, const ModelOptions& options, DType cache_dtype)
      : config_(ModelConfig::from_dir(dir)),
        store_(TensorStore::open(dir)),
        model_(create_model(host_execution_context(), config_, store_, options)),
        cache_(cache_spec(*model_, cache_dtype), kNumBlocks, kBlockSize) {}

  // One forward over (sequence, new token count) pairs; appends each sequence's last logits row.
  void step(const test::StepWork& work, std::vector<float>& out) {
    for (auto [s, n] : work) {
      const auto needed = static_cast<size_t>((s->num_computed + n + kBlockSize - 1) / kBlockSize);
      while (s->block_table.size() < needed) s->block_table.push_back(--next_block_);
    }
    test::forward_step(*model_, cache_.cache(), work, out);
  }

  int64_t vocab_size() const { return model_->vocab_size(); }

 private:
  static KvCacheSpec cache_spec(const Model& model, DType dtype) {
    KvCacheSpec spec = model.kv_cache_spec();
    spec.dtype = dtype;
    return spec;
  }

  static constexpr int32_t kNumBlocks = 64;
  ModelConfig config_;
  TensorStore store_;
  std::unique_ptr<Model> model_;
  test::OwnedKvCache cache_;
  int32_t next_block_ = kNumBlocks;
};

std::vector<int32_t> ids(int32_t n, int32_t seed) {
  std::vector<int32_t> v;
  for (int32_t i = 0; i < n; ++i) v.push_back((seed * 131 + i * 37 + i * i * 7) % 509);
  return v;
}

// Three sequences over four steps: A's 40-token prompt in one step, then decodes; B's prompt in
// chunks of 7, 12 and 3 over its cached prefix; C's in chunks of 20 and 9. Under a threshold of
// 8 the steps mix both forms, the third with an expanded sequence between absorbed ones.
std::vector<float> run_schedule(const std::string& dir, const ModelOptions& options,
                                DType cache_dtype, int64_t* vocab) {
  Runner r(dir, options, cache_dtype);
  test::PagedSequence a{ids(48, 1), {}, 0}, b{ids(48, 2), {}, 0}, c{ids(48, 3), {}, 0};
  std::vector<float> out;
  r.step({{&a, 40}, {&b, 7}}, out);
  r.step({{&a, 1}, {&c, 20}, {&b, 12}}, out);
  r.step({{&b, 3}, {&c, 9}, {&a, 1}}, out);
  r.step({{&a, 1}, {&b, 1}, {&c, 1}}, out);
  *vocab = r.vocab_size();
  return out;
}

class MlaExpandedForm : public ::testing::TestWithParam<std::string> {
 protected:
  static std::string model_dir(const std::string& architecture) {
    const fs::path dir = fs::temp_directory_path() /
                         ("pagoda_mla_expanded_" + std::to_string(getpid()) + "_" + architecture);
    if (!fs::exists(dir / "config.json")) generate_model(tiny_spec(architecture), dir.string());
    return dir.string();
  }
  static void TearDownTestSuite() {
    for (const char* arch : {"DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM"}) {
      fs::remove_all(fs::temp_directory_path() /
                     ("pagoda_mla_expanded_" + std::to_string(getpid()) + "_" + arch));
    }
  }
};

// Largest |got - want| of a row relative to the row's largest |want| (at least 1), over every
// row; and whether every row's argmax agrees.
struct Difference {
  double max_relative = 0.0;
  bool same_argmax = true;
};

Difference compare(const std::vector<float>& got, const std::vector<float>& want, int64_t vocab) {
  Difference d;
  for (size_t row = 0; row * vocab < want.size(); ++row) {
    const float* g = got.data() + row * vocab;
    const float* w = want.data() + row * vocab;
    double scale = 1.0, err = 0.0;
    for (int64_t i = 0; i < vocab; ++i) scale = std::max(scale, double{std::fabs(w[i])});
    for (int64_t i = 0; i < vocab; ++i) err = std::max(err, double{std::fabs(g[i] - w[i])});
    d.max_relative = std::max(d.max_relative, err / scale);
    d.same_argmax &= std::max_element(g, g + vocab) == g + (std::max_element(w, w + vocab) - w);
  }
  return d;
}

// Both forms compute the same attention in fp32 over the same cached latents, summed in
// different orders: per row, 1e-5 of the largest logit (observed: at most 1.1e-6). A bf16 cache
// rounds each layer's latents to 8 bits, so a difference in the last fp32 bits that crosses a
// rounding boundary reaches the next layer as 2^-8 of that value: 1e-3 (observed: 5.3e-5).
constexpr double kTolerance = 1e-5, kBf16CacheTolerance = 1e-3;

TEST_P(MlaExpandedForm, MatchesAbsorbedFormForcedMixedAndInHeadGroups) {
  const std::string dir = model_dir(GetParam());
  ModelOptions absorbed;
  absorbed.mla_expanded_min_tokens = INT32_MAX;
  ModelOptions forced = absorbed;  // every sequence, decodes too
  forced.mla_expanded_min_tokens = 1;
  ModelOptions mixed = absorbed;  // chunks of 8+ tokens, one head per group
  mixed.mla_expanded_min_tokens = 8;
  mixed.mla_expanded_scratch_bytes = 1;
  struct Case {
    const ModelOptions* options;
    DType cache_dtype;  // a bf16 latent cache is widened as the expanded form reads it back
  };
  int64_t vocab = 0;
  const std::vector<float> want_f32 = run_schedule(dir, absorbed, DType::kF32, &vocab);
  const std::vector<float> want_bf16 = run_schedule(dir, absorbed, DType::kBF16, &vocab);
  for (const Case& c :
       {Case{&forced, DType::kF32}, Case{&mixed, DType::kF32}, Case{&forced, DType::kBF16}}) {
    const std::vector<float>& want = c.cache_dtype == DType::kF32 ? want_f32 : want_bf16;
    const std::vector<float> got = run_schedule(dir, *c.options, c.cache_dtype, &vocab);
    ASSERT_EQ(got.size(), want.size());
    const Difference d = compare(got, want, vocab);
    EXPECT_LE(d.max_relative, c.cache_dtype == DType::kF32 ? kTolerance : kBf16CacheTolerance)
        << "min tokens " << c.options->mla_expanded_min_tokens << ", cache "
        << dtype_name(c.cache_dtype);
    EXPECT_TRUE(d.same_argmax);
    // The forms round differently: identical bits would mean the expanded form never ran.
    EXPECT_GT(d.max_relative, 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(V2AndV3, MlaExpandedForm,
                         ::testing::Values("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM"),
                         [](const auto& info) {
                           return std::string(info.param.find("V3") != std::string::npos ? "V3"
                                                                                         : "V2");
                         });

}  // namespace
}  // namespace pagoda
