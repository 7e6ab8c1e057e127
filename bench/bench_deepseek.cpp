// DeepSeek-V2-Lite-shaped decode speed and where a step's time goes, measured in one run:
//  - writes (once) a V2-Lite-shaped model with 4 layers in bf16 (hidden 2048, 16 heads,
//    q_lora none, kv_lora 512, rope 64, 64 routed experts top-6 + 2 shared, first layer
//    dense, vocab 102400) with random weights, and loads it through the model registry;
//  - KV bytes per token of the latent cache vs the expanded K/V cache at that shape;
//  - prefill speed (absorbed MLA), then decode tokens/s at batch 1 and 16;
//  - the split of a decode step: the MLA block (projections + latent attention) and the MoE
//    layers are timed on their own with the same weights, inputs and cache, the rest
//    (embedding, dense layer 0, norms, residuals, lm_head) is the remainder.
// Threads: OMP_NUM_THREADS (default: every core).
// Usage: bench_deepseek [MODEL_DIR (default /tmp/pagoda-bench-v2lite-4l)] [context_len] [steps]
#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernels/host_context.h"
#include "kernels/mla_attention.h"
#include "kernels/ops.h"
#include "loader/safetensors.h"
#include "loader/safetensors_writer.h"
#include "model/deepseek_config.h"
#include "model/forward_batch.h"
#include "model/kv_cache.h"
#include "model/layers/moe.h"
#include "model/model_config.h"
#include "model/model_registry.h"
#include "model/weights.h"
#include "util/half.h"

namespace {

using namespace pagoda;

constexpr int64_t kHidden = 2048, kInter = 10944, kMoeInter = 1408, kHeads = 16, kVocab = 102400;
constexpr int64_t kRank = 512, kNope = 128, kRope = 64, kV = 128, kExperts = 64, kLayers = 4;
constexpr int32_t kBlockSize = 16;

nlohmann::json v2_lite_config() {
  return {{"architectures", {"DeepseekV2ForCausalLM"}},
          {"model_type", "deepseek_v2"},
          {"hidden_size", kHidden},
          {"intermediate_size", kInter},
          {"num_hidden_layers", kLayers},
          {"num_attention_heads", kHeads},
          {"num_key_value_heads", kHeads},
          {"vocab_size", kVocab},
          {"q_lora_rank", nullptr},
          {"kv_lora_rank", kRank},
          {"qk_nope_head_dim", kNope},
          {"qk_rope_head_dim", kRope},
          {"v_head_dim", kV},
          {"n_routed_experts", kExperts},
          {"num_experts_per_tok", 6},
          {"n_shared_experts", 2},
          {"moe_intermediate_size", kMoeInter},
          {"first_k_dense_replace", 1},
          {"moe_layer_freq", 1},
          {"topk_method", "greedy"},
          {"n_group", 1},
          {"topk_group", 1},
          {"norm_topk_prob", false},
          {"scoring_func", "softmax"},
          {"routed_scaling_factor", 1.0},
          {"rms_norm_eps", 1e-6},
          {"rope_theta", 10000},
          {"max_position_embeddings", 163840},
          {"torch_dtype", "bfloat16"},
          {"bos_token_id", 100000},
          {"eos_token_id", 100001},
          {"rope_scaling",
           {{"type", "yarn"},
            {"factor", 40},
            {"original_max_position_embeddings", 4096},
            {"beta_fast", 32},
            {"beta_slow", 1},
            {"mscale", 0.707},
            {"mscale_all_dim", 0.707}}}};
}

// Fills bf16 values uniform in [-scale, scale) from a per-element hash (parallel, fast).
void fill_bf16(uint8_t* dst, int64_t n, float scale, uint64_t seed) {
  auto* out = reinterpret_cast<bf16_t*>(dst);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    uint64_t z = (seed + static_cast<uint64_t>(i)) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float u = static_cast<float>(z >> 40) / static_cast<float>(1ull << 24);  // [0, 1)
    out[i] = f32_to_bf16((2.0f * u - 1.0f) * scale);
  }
}

void write_model(const std::string& dir) {
  std::filesystem::create_directories(dir);
  std::vector<TensorLayout> layout;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    layout.push_back({name, "BF16", std::move(shape)});
  };
  add("model.embed_tokens.weight", {kVocab, kHidden});
  for (int64_t i = 0; i < kLayers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    add(p + "input_layernorm.weight", {kHidden});
    add(p + "post_attention_layernorm.weight", {kHidden});
    add(p + "self_attn.q_proj.weight", {kHeads * (kNope + kRope), kHidden});
    add(p + "self_attn.kv_a_proj_with_mqa.weight", {kRank + kRope, kHidden});
    add(p + "self_attn.kv_a_layernorm.weight", {kRank});
    add(p + "self_attn.kv_b_proj.weight", {kHeads * (kNope + kV), kRank});
    add(p + "self_attn.o_proj.weight", {kHidden, kHeads * kV});
    auto mlp = [&](const std::string& q, int64_t inter) {
      add(q + "gate_proj.weight", {inter, kHidden});
      add(q + "up_proj.weight", {inter, kHidden});
      add(q + "down_proj.weight", {kHidden, inter});
    };
    if (i == 0) {
      mlp(p + "mlp.", kInter);
      continue;
    }
    add(p + "mlp.gate.weight", {kExperts, kHidden});
    for (int64_t e = 0; e < kExperts; ++e) mlp(fmt::format("{}mlp.experts.{}.", p, e), kMoeInter);
    mlp(p + "mlp.shared_experts.", 2 * kMoeInter);
  }
  add("model.norm.weight", {kHidden});
  add("lm_head.weight", {kVocab, kHidden});

  SafetensorsWriter writer(dir + "/model.safetensors", layout);
  for (size_t i = 0; i < writer.num_tensors(); ++i) {
    const TensorLayout& t = writer.layout(i);
    const int64_t n = writer.size_bytes(i) / 2;
    if (t.shape.size() == 1) {
      fill_bf16(writer.data(i), n, 0.1f, i * 7919);  // norms: 1 +- 0.1 below
      auto* v = reinterpret_cast<bf16_t*>(writer.data(i));
      for (int64_t j = 0; j < n; ++j) v[j] = f32_to_bf16(1.0f + bf16_to_f32(v[j]));
    } else {
      fill_bf16(writer.data(i), n, 1.7f / std::sqrt(static_cast<float>(t.shape[1])), i * 7919);
    }
  }
  writer.finish();
  std::ofstream(dir + "/config.json") << v2_lite_config().dump(2);
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Seq {
  std::vector<int32_t> blocks;
  int32_t len = 0;
};

// One step: each sequence gets `n` new tokens (prefill chunk or decode).
void make_batch(std::vector<Seq>& seqs, int32_t n, ForwardBatch& batch) {
  batch.clear();
  for (Seq& s : seqs) {
    ForwardSequence fs;
    fs.token_begin = static_cast<int32_t>(batch.token_ids.size());
    fs.num_tokens = n;
    fs.context_len = s.len + n;
    fs.block_table = s.blocks.data();
    fs.needs_logits = true;
    for (int32_t p = s.len; p < s.len + n; ++p) {
      batch.token_ids.push_back((p * 7919 + fs.token_begin * 31) % 100000);
      batch.positions.push_back(p);
      batch.slot_mapping.push_back(
          int64_t{s.blocks[static_cast<size_t>(p / kBlockSize)]} * kBlockSize + p % kBlockSize);
    }
    batch.sequences.push_back(fs);
    s.len += n;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "/tmp/pagoda-bench-v2lite-4l";
  const int32_t context = argc > 2 ? std::atoi(argv[2]) : 256;
  const int32_t steps = argc > 3 ? std::atoi(argv[3]) : 8;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    if (!std::filesystem::exists(dir + "/model.safetensors")) {
      std::printf("writing a V2-Lite-shaped 4-layer bf16 model to %s ...\n", dir.c_str());
      const double t0 = now_s();
      write_model(dir);
      std::printf("  written in %.1f s\n", now_s() - t0);
    }
    const ModelConfig config = ModelConfig::from_dir(dir);
    const TensorStore store = TensorStore::open(dir);
    ModelOptions options;
    options.max_num_batched_tokens = 2048;
    const std::unique_ptr<Model> model =
        create_model(host_execution_context(), config, store, options);
    const DeepseekConfig dc = DeepseekConfig::from_model_config(config);
    std::printf("%s, %d threads, %.2f GB of weights, %lld parameters\n", kernels().isa,
                omp_get_max_threads(), model->weight_bytes() / 1e9,
                static_cast<long long>(model->num_parameters()));

    // KV cache per token (fp32 cache; the latent form vs the K/V that MHA would cache).
    const KvCacheSpec spec = model->kv_cache_spec();
    const int64_t expanded_values = kHeads * ((kNope + kRope) + kV);
    std::printf(
        "\nKV cache per token and layer: latent %lld values (%lld B) vs expanded K/V %lld "
        "values (%lld B): %.1fx smaller\n",
        static_cast<long long>(spec.values_per_token_per_layer()),
        static_cast<long long>(spec.values_per_token_per_layer() * 4),
        static_cast<long long>(expanded_values), static_cast<long long>(expanded_values * 4),
        static_cast<double>(expanded_values) / spec.values_per_token_per_layer());
    std::printf("  full V2-Lite (27 layers): %lld B vs %lld B per token\n",
                static_cast<long long>(spec.values_per_token_per_layer() * 4 * 27),
                static_cast<long long>(expanded_values * 4 * 27));

    const int32_t max_len = context + steps + 1;
    const int32_t blocks_per_seq = (max_len + kBlockSize - 1) / kBlockSize;
    const int32_t max_seqs = 16;
    std::vector<float> cache_memory(static_cast<size_t>(
        KvCache::bytes_needed(spec, blocks_per_seq * max_seqs, kBlockSize) / 4));
    KvCache cache(spec, blocks_per_seq * max_seqs, kBlockSize, cache_memory.data());
    std::vector<float> logits(static_cast<size_t>(max_seqs * kVocab));
    ForwardBatch batch;

    // The pieces timed on their own, with every layer's real weights (one layer's alone would
    // stay in the last-level cache and look faster than it is in a real step).
    struct MlaLayerWeights {
      WeightView q_proj, kv_a, kv_b, o_proj;
    };
    std::vector<MlaLayerWeights> mla_w;
    std::vector<MoeWeights> moe_w;
    WeightLoader loader(store, WeightOptions{}, host_execution_context());
    auto load_matrix = [&loader](const TensorStore&, const std::string& name, int64_t rows,
                                 int64_t cols) {
      return loader.matrix_as_stored(name, rows, cols);
    };
    for (int64_t i = 0; i < kLayers; ++i) {
      const std::string p = fmt::format("model.layers.{}.", i);
      mla_w.push_back(
          {load_matrix(store, p + "self_attn.q_proj.weight", kHeads * (kNope + kRope), kHidden),
           load_matrix(store, p + "self_attn.kv_a_proj_with_mqa.weight", kRank + kRope, kHidden),
           load_matrix(store, p + "self_attn.kv_b_proj.weight", kHeads * (kNope + kV), kRank),
           load_matrix(store, p + "self_attn.o_proj.weight", kHidden, kHeads * kV)});
      if (i == 0) continue;  // layer 0 is dense
      MoeWeights m;
      m.router = load_matrix(store, p + "mlp.gate.weight", kExperts, kHidden);
      for (int64_t e = 0; e < kExperts; ++e) {
        const std::string q = fmt::format("{}mlp.experts.{}.", p, e);
        m.experts.push_back({load_matrix(store, q + "gate_proj.weight", kMoeInter, kHidden),
                             load_matrix(store, q + "up_proj.weight", kMoeInter, kHidden),
                             load_matrix(store, q + "down_proj.weight", kHidden, kMoeInter)});
      }
      m.has_shared = true;
      m.shared = {
          load_matrix(store, p + "mlp.shared_experts.gate_proj.weight", 2 * kMoeInter, kHidden),
          load_matrix(store, p + "mlp.shared_experts.up_proj.weight", 2 * kMoeInter, kHidden),
          load_matrix(store, p + "mlp.shared_experts.down_proj.weight", kHidden, 2 * kMoeInter)};
      moe_w.push_back(std::move(m));
    }
    MoeDispatcher moe;

    for (const int32_t batch_size : {1, 16}) {
      std::vector<Seq> seqs(static_cast<size_t>(batch_size));
      for (int32_t i = 0; i < batch_size; ++i) {
        for (int32_t b = 0; b < blocks_per_seq; ++b)
          seqs[static_cast<size_t>(i)].blocks.push_back(i * blocks_per_seq + b);
      }
      // Batch 1 prefills its context in one forward (absorbed MLA throughout) and reports the
      // speed; larger batches start from a cache filled with small values instead (the decode
      // cost does not depend on what the cache holds, and prefilling 16 contexts is slow).
      double prefill_s = 0;
      if (batch_size == 1) {
        make_batch(seqs, context, batch);
        const double t0 = now_s();
        model->forward(host_execution_context(), batch, cache, logits.data());
        prefill_s = now_s() - t0;
      } else {
        for (size_t i = 0; i < cache_memory.size(); ++i)
          cache_memory[i] = 0.001f * static_cast<float>(i % 101);
        for (Seq& s : seqs) s.len = context;
      }
      // Decode steps.
      make_batch(seqs, 1, batch);
      model->forward(host_execution_context(), batch, cache, logits.data());  // warm-up
      double decode_s = 1e30;
      double total = 0;
      for (int32_t s = 0; s < steps; ++s) {
        make_batch(seqs, 1, batch);
        const double t0 = now_s();
        model->forward(host_execution_context(), batch, cache, logits.data());
        const double dt = now_s() - t0;
        total += dt;
        decode_s = std::min(decode_s, dt);
      }
      const double mean_s = total / steps;

      // The MLA block of one layer at this batch: projections, absorption, latent attention.
      const int64_t T = batch_size;
      std::vector<float> x(static_cast<size_t>(T * kHidden), 0.01f),
          q(static_cast<size_t>(T * kHeads * (kNope + kRope)));
      std::vector<float> kv(static_cast<size_t>(T * (kRank + kRope))),
          q_abs(static_cast<size_t>(T * kHeads * (kRank + kRope)), 0.01f);
      std::vector<float> ctx(static_cast<size_t>(T * kHeads * kRank)),
          attn(static_cast<size_t>(T * kHeads * kV)), y(static_cast<size_t>(T * kHidden));
      std::vector<AttentionSequence> attn_seqs;
      for (int32_t i = 0; i < batch_size; ++i) {
        attn_seqs.push_back(
            {i, 1, seqs[static_cast<size_t>(i)].len, seqs[static_cast<size_t>(i)].blocks.data()});
      }
      auto mla_block = [&] {
        for (int64_t i = 0; i < kLayers; ++i) {
          const MlaLayerWeights& w = mla_w[static_cast<size_t>(i)];
          ops::matmul(x.data(), T, w.q_proj, q.data());
          ops::matmul(x.data(), T, w.kv_a, kv.data());
#pragma omp parallel for
          for (int64_t h = 0; h < kHeads; ++h) {  // W_uk^T q_nope and W_uv ctx: same bytes, flops
            const auto* kv_b = static_cast<const uint8_t*>(w.kv_b.data);
            const WeightView w_uk{kv_b + h * (kNope + kV) * kRank * 2, w.kv_b.dtype, kNope, kRank};
            const WeightView w_uv{kv_b + (h * (kNope + kV) + kNope) * kRank * 2, w.kv_b.dtype, kV,
                                  kRank};
            float* out = &attn[static_cast<size_t>(h * kV)];
            ops::matmul(&ctx[static_cast<size_t>(h * T * kRank)], T, w_uk, out, kHeads * kV);
            ops::matmul(&ctx[static_cast<size_t>(h * T * kRank)], T, w_uv, out, kHeads * kV);
          }
          mla_attention(q_abs.data(), kHeads, kRank, cache.layer(static_cast<int32_t>(i)),
                        attn_seqs.data(), batch_size, dc.softmax_scale, ctx.data());
          ops::matmul(attn.data(), T, w.o_proj, y.data());
        }
      };
      auto moe_block = [&] {
        for (const MoeWeights& m : moe_w)
          moe.forward(host_execution_context(), dc.router, m, x.data(), T, y.data());
      };
      // Router inputs: rows of a real hidden state would route more evenly than constant ones.
      for (int64_t i = 0; i < T * kHidden; ++i)
        x[static_cast<size_t>(i)] = 0.02f * static_cast<float>((i * 7919) % 97 - 48);
      auto best = [&](auto&& fn) {
        fn();
        double b = 1e30;
        for (int r = 0; r < 3; ++r) {
          const double t0 = now_s();
          fn();
          b = std::min(b, now_s() - t0);
        }
        return b;
      };
      const double mla_s = best(mla_block);
      const double moe_s = best(moe_block);
      const double rest_s = std::max(0.0, decode_s - mla_s - moe_s);

      std::printf("\nbatch %d, context %d:\n", batch_size, context);
      if (prefill_s > 0)
        std::printf("  prefill %d tokens: %.1f tokens/s\n", context, context / prefill_s);
      std::printf(
          "  decode step: best %.1f ms, mean %.1f ms -> %.1f tokens/s (best), %.1f (mean)\n",
          decode_s * 1e3, mean_s * 1e3, batch_size / decode_s, batch_size / mean_s);
      std::printf(
          "  split of the best step: MLA attention %.1f ms (%.0f%%), MoE %.1f ms (%.0f%%), "
          "rest (embedding, dense layer 0, norms, lm_head) %.1f ms (%.0f%%)\n",
          mla_s * 1e3, 100 * mla_s / decode_s, moe_s * 1e3, 100 * moe_s / decode_s, rest_s * 1e3,
          100 * rest_s / decode_s);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
