// MLA prefill in the weight-absorbed form vs the expanded form (layers/mla_attention.h), on the
// DeepSeek-V2-Lite attention shape, measured in one run:
//  - writes (once) a V2-Lite-shaped model in bf16 (hidden 2048, 16 heads, no q_lora, kv_lora
//    512, nope 128, rope 64, v 128) whose MLP is one dense expert-sized MLP (1408) and whose
//    vocabulary is 1024, so that a forward's time is the attention block's, not the experts';
//  - loads it twice through the registry: mla_expanded_min_tokens INT32_MAX (absorbed) and 1
//    (expanded);
//  - prompts of 512, 2048 and 4096 tokens prefilled in chunks of at most 2048 (the default
//    max_num_batched_tokens): milliseconds per prompt token in each form, and each form's cost
//    at 4096 tokens over its cost at 512;
//  - the crossover: one chunk of n new tokens after a cached context, ending at 4096 tokens,
//    for n = 16 .. 512: milliseconds per new token in each form. The smallest n where the
//    expanded form is faster is what ModelOptions::mla_expanded_min_tokens should be.
// Each figure is the best of 3 runs after one warm-up. Threads: OMP_NUM_THREADS.
// Usage: bench_mla_prefill [MODEL_DIR (default /tmp/pagoda-bench-mla-prefill)] [num_layers (1)]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "demo/model_generator.h"
#include "kernels/host_context.h"
#include "kernels/kernels.h"
#include "loader/safetensors.h"
#include "model/forward_batch.h"
#include "model/kv_cache.h"
#include "model/model_config.h"
#include "model/model_registry.h"

namespace {

using namespace pagoda;

constexpr int32_t kBlockSize = 16;
constexpr int32_t kMaxTokens = 4096;
constexpr int32_t kMaxChunk = 2048;  // ModelOptions' default max_num_batched_tokens

ModelSpec bench_spec(int64_t num_layers) {
  ModelSpec spec = model_preset("deepseek-v2-lite");
  spec.preset.clear();
  spec.num_layers = num_layers;
  spec.intermediate_size = 1408;
  spec.deepseek.n_routed_experts = 0;  // every layer dense
  spec.deepseek.n_shared_experts = 0;
  spec.vocab_size = 1024;
  spec.max_position_embeddings = kMaxTokens + 16;
  spec.seed = 5;
  return spec;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Tokens [first, first + n) of the one sequence, whose blocks are 0, 1, 2, ...
void make_chunk(const std::vector<int32_t>& blocks, int32_t first, int32_t n, ForwardBatch& batch) {
  batch.clear();
  ForwardSequence fs;
  fs.token_begin = 0;
  fs.num_tokens = n;
  fs.context_len = first + n;
  fs.block_table = blocks.data();
  fs.needs_logits = true;
  for (int32_t p = first; p < first + n; ++p) {
    batch.token_ids.push_back((p * 7919) % 1000);
    batch.positions.push_back(p);
    batch.slot_mapping.push_back(int64_t{blocks[static_cast<size_t>(p / kBlockSize)]} * kBlockSize +
                                 p % kBlockSize);
  }
  batch.sequences.push_back(fs);
}

class Bench {
 public:
  Bench(Model& model, KvCache& cache) : model_(model), cache_(cache) {
    for (int32_t b = 0; b < kMaxTokens / kBlockSize; ++b) blocks_.push_back(b);
    logits_.resize(static_cast<size_t>(model.vocab_size()));
  }

  // Positions [first, first + n) in chunks of at most kMaxChunk; seconds.
  double run(int32_t first, int32_t n) {
    const double t0 = now_s();
    for (int32_t p = first; p < first + n; p += kMaxChunk) {
      make_chunk(blocks_, p, std::min(kMaxChunk, first + n - p), batch_);
      model_.forward(host_execution_context(), batch_, cache_, logits_.data());
    }
    return now_s() - t0;
  }

  double best_of_3(int32_t first, int32_t n) {
    run(first, n);  // warm-up: activations grown, weights paged in
    double best = 1e30;
    for (int r = 0; r < 3; ++r) best = std::min(best, run(first, n));
    return best;
  }

 private:
  Model& model_;
  KvCache& cache_;
  std::vector<int32_t> blocks_;
  std::vector<float> logits_;
  ForwardBatch batch_;
};

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "/tmp/pagoda-bench-mla-prefill";
  const int64_t num_layers = argc > 2 ? std::atoi(argv[2]) : 1;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    if (!std::filesystem::exists(dir + "/config.json")) {
      std::printf("writing a V2-Lite-attention-shaped %lld-layer bf16 model to %s ...\n",
                  static_cast<long long>(num_layers), dir.c_str());
      generate_model(bench_spec(num_layers), dir);
    }
    const ModelConfig config = ModelConfig::from_dir(dir);
    const TensorStore store = TensorStore::open(dir);
    ModelOptions absorbed_options;
    absorbed_options.mla_expanded_min_tokens = INT32_MAX;
    ModelOptions expanded_options;
    expanded_options.mla_expanded_min_tokens = 1;
    const std::unique_ptr<Model> absorbed_model = create_model(host_execution_context(), config, store, absorbed_options);
    const std::unique_ptr<Model> expanded_model = create_model(host_execution_context(), config, store, expanded_options);

    // One cache for both: the same weights write the same latents (up to rounding) in either
    // form, and a timed chunk rewrites only its own slots.
    const KvCacheSpec spec = absorbed_model->kv_cache_spec();
    const int32_t num_blocks = kMaxTokens / kBlockSize;
    std::vector<float> memory(
        static_cast<size_t>(KvCache::bytes_needed(spec, num_blocks, kBlockSize) / 4));
    KvCache cache(spec, num_blocks, kBlockSize, memory.data());
    Bench absorbed(*absorbed_model, cache), expanded(*expanded_model, cache);

    std::printf("%s, %d threads, %lld layers; kDefaultMlaExpandedMinTokens = %d\n", kernels().isa,
                omp_get_max_threads(), static_cast<long long>(num_layers),
                kDefaultMlaExpandedMinTokens);
    std::printf("\nwhole prompts, in chunks of at most %d tokens (ms per prompt token):\n",
                kMaxChunk);
    std::printf(
        "| prompt tokens | absorbed | expanded | absorbed / expanded |\n|---|---|---|---|\n");
    double absorbed_512 = 0, expanded_512 = 0, absorbed_4096 = 0, expanded_4096 = 0;
    for (const int32_t n : {512, 2048, 4096}) {
      const double a = absorbed.best_of_3(0, n) / n * 1e3;
      const double e = expanded.best_of_3(0, n) / n * 1e3;
      std::printf("| %d | %.3f | %.3f | %.2fx |\n", n, a, e, a / e);
      if (n == 512) absorbed_512 = a, expanded_512 = e;
      if (n == 4096) absorbed_4096 = a, expanded_4096 = e;
    }
    std::printf("per-token cost at 4096 over 512: absorbed %.2fx, expanded %.2fx\n",
                absorbed_4096 / absorbed_512, expanded_4096 / expanded_512);

    std::printf("\none chunk of n new tokens ending at %d tokens of context (ms per new token):\n",
                kMaxTokens);
    std::printf("| n | absorbed | expanded | absorbed / expanded |\n|---|---|---|---|\n");
    expanded.run(0, kMaxTokens);  // the context every chunk sees
    int32_t crossover = 0;
    for (const int32_t n : {16, 32, 64, 128, 256, 512}) {
      const double a = absorbed.best_of_3(kMaxTokens - n, n) / n * 1e3;
      const double e = expanded.best_of_3(kMaxTokens - n, n) / n * 1e3;
      std::printf("| %d | %.3f | %.3f | %.2fx |\n", n, a, e, a / e);
      if (crossover == 0 && e < a) crossover = n;
    }
    if (crossover > 0) {
      std::printf("expanded is faster from n = %d new tokens on (of those tried)\n", crossover);
    } else {
      std::printf("absorbed is faster at every n tried\n");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
