// open_gguf_model end to end: a generated HF model directory is converted to GGUF the way
// llama.cpp's convert_hf_to_gguf.py does it (names, metadata, Llama q/k rows permuted for
// interleaved rope, tokenizer as tokenizer.ggml.*), and the GGUF model must give the HF
// directory's logits at every position, and tokenize the same. Also the real
// llama-2-tiny-random.gguf opens and runs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/test_paths.h"
#include "demo/model_generator.h"
#include "device/cpu_device.h"
#include "kernels/host_context.h"
#include "kernels/kernels.h"
#include "loader/gguf_builder.h"
#include "loader/safetensors.h"
#include "model/forward_batch.h"
#include "model/gguf_model.h"
#include "model/kv_cache.h"
#include "model/model_config.h"
#include "model/model_registry.h"
#include "model/weights.h"
#include "test_helpers.h"
#include "util/half.h"

namespace pagoda {
namespace {

using test::error_of;
using test::expect_message;
using test::GgufBuilder;
using test::TempDir;

constexpr uint32_t kGgmlF32 = 0;
constexpr uint32_t kGgmlQ4_0 = 2;
constexpr uint32_t kGgmlQ4_1 = 3;
constexpr uint32_t kGgmlQ8_0 = 8;

// HF name -> GGUF name (the inverse of what the loader maps).
std::string gguf_name(const std::string& hf) {
  static const std::pair<const char*, const char*> kGlobal[] = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"}};
  for (const auto& [h, g] : kGlobal) {
    if (hf == h) return g;
  }
  static const std::pair<const char*, const char*> kLayer[] = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"}};
  const size_t layer_end = hf.find('.', std::string("model.layers.").size());
  const std::string layer = hf.substr(13, layer_end - 13);
  const std::string rest = hf.substr(layer_end + 1);
  for (const auto& [h, g] : kLayer) {
    if (rest == h) return fmt::format("blk.{}.{}", layer, g);
  }
  ADD_FAILURE() << "no GGUF name for " << hf;
  return hf;
}

// convert_hf_to_gguf's permute(): rows [heads, 2, head_dim/2] -> [heads, head_dim/2, 2].
std::vector<float> llama_cpp_permute(const float* w, int64_t rows, int64_t cols, int64_t heads) {
  const int64_t head_dim = rows / heads;
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t j = 0; j < head_dim / 2; ++j) {
        const int64_t src = h * head_dim + i * head_dim / 2 + j;
        const int64_t dst = h * head_dim + 2 * j + i;
        std::copy(w + src * cols, w + (src + 1) * cols, out.begin() + dst * cols);
      }
    }
  }
  return out;
}

std::vector<uint8_t> as_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// ggml's Q8_0 reference quantization of one row (d = absmax / 127, round half away from zero).
std::vector<uint8_t> q8_0(const float* x, int64_t n) {
  std::vector<uint8_t> out;
  for (int64_t b = 0; b < n / 32; ++b) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[32 * b + i]));
    const float d = amax / 127.0f;
    const uint16_t dh = f32_to_f16(d);
    out.push_back(static_cast<uint8_t>(dh & 0xff));
    out.push_back(static_cast<uint8_t>(dh >> 8));
    for (int i = 0; i < 32; ++i) {
      out.push_back(
          static_cast<uint8_t>(static_cast<int8_t>(d > 0 ? std::round(x[32 * b + i] / d) : 0.0f)));
    }
  }
  return out;
}

// Q4_0 (symmetric: d = the value of largest magnitude / -8, q = round(x / d) + 8) and Q4_1
// (d = (max - min) / 15, m = min, q = round((x - m) / d)) of one row, in ggml's block layouts:
// byte j of a block's 16 holds value j and (high nibble) value j + 16.
std::vector<uint8_t> q4(const float* x, int64_t n, bool with_min) {
  std::vector<uint8_t> out;
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* v = x + 32 * b;
    float lo = v[0], hi = v[0], extreme = 0;
    for (int i = 0; i < 32; ++i) {
      lo = std::min(lo, v[i]);
      hi = std::max(hi, v[i]);
      if (std::fabs(v[i]) > std::fabs(extreme)) extreme = v[i];
    }
    const float d = with_min ? (hi - lo) / 15.0f : extreme / -8.0f;
    const float offset = with_min ? lo : -8.0f * d;
    for (const float h : with_min ? std::vector<float>{d, lo} : std::vector<float>{d}) {
      const uint16_t bits = f32_to_f16(h);
      out.push_back(static_cast<uint8_t>(bits & 0xff));
      out.push_back(static_cast<uint8_t>(bits >> 8));
    }
    uint8_t q[32];
    for (int i = 0; i < 32; ++i) {
      const float r = d != 0 ? std::round((v[i] - offset) / d) : 0.0f;
      q[i] = static_cast<uint8_t>(std::clamp(r, 0.0f, 15.0f));
    }
    for (int j = 0; j < 16; ++j) out.push_back(static_cast<uint8_t>(q[j] | q[j + 16] << 4));
  }
  return out;
}

// Writes `hf_dir` as a GGUF file the way llama.cpp's converter lays it out: 2-D weights other
// than the embedding as `type` (kGgmlF32, kGgmlQ8_0, kGgmlQ4_0 or kGgmlQ4_1), the rest F32.
void convert_to_gguf(const std::string& hf_dir, const std::string& out, uint32_t type) {
  const ModelConfig c = ModelConfig::from_dir(hf_dir);
  const TensorStore store = TensorStore::open(hf_dir);
  const bool llama = c.architecture == "LlamaForCausalLM";
  const std::string arch = llama ? "llama" : "qwen2";
  GgufBuilder b;
  b.kv_string("general.architecture", arch);
  b.kv<uint32_t>(arch + ".context_length", GgufBuilder::kU32,
                 static_cast<uint32_t>(c.max_position_embeddings));
  b.kv<uint32_t>(arch + ".embedding_length", GgufBuilder::kU32,
                 static_cast<uint32_t>(c.hidden_size));
  b.kv<uint32_t>(arch + ".block_count", GgufBuilder::kU32,
                 static_cast<uint32_t>(c.num_hidden_layers));
  b.kv<uint32_t>(arch + ".feed_forward_length", GgufBuilder::kU32,
                 static_cast<uint32_t>(c.intermediate_size));
  b.kv<uint32_t>(arch + ".attention.head_count", GgufBuilder::kU32,
                 static_cast<uint32_t>(c.num_attention_heads));
  b.kv<uint32_t>(arch + ".attention.head_count_kv", GgufBuilder::kU32,
                 static_cast<uint32_t>(c.num_key_value_heads));
  b.kv<float>(arch + ".attention.layer_norm_rms_epsilon", GgufBuilder::kF32,
              static_cast<float>(c.rms_norm_eps));
  b.kv<float>(arch + ".rope.freq_base", GgufBuilder::kF32, static_cast<float>(c.rope_theta));
  b.kv<uint32_t>(arch + ".rope.dimension_count", GgufBuilder::kU32,
                 static_cast<uint32_t>(c.head_dim));

  // Tokenizer: the directory's byte-level BPE as tokenizer.ggml.* (gpt2 model, default pre).
  std::ifstream tf(hf_dir + "/tokenizer.json");
  const nlohmann::json tj = nlohmann::json::parse(tf);
  std::vector<std::string> tokens(c.vocab_size);
  std::vector<int32_t> types(c.vocab_size, 1);
  for (const auto& [token, id] : tj["model"]["vocab"].items()) tokens[id.get<size_t>()] = token;
  for (const auto& added : tj["added_tokens"]) {
    const size_t id = added["id"].get<size_t>();
    tokens[id] = added["content"].get<std::string>();
    types[id] = added["special"].get<bool>() ? 3 : 4;
  }
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (tokens[id].empty()) {
      tokens[id] = fmt::format("[PAD{}]", id);  // as the converter pads the vocab
      types[id] = 5;
    }
  }
  std::vector<std::string> merges;
  for (const auto& m : tj["model"]["merges"]) {
    merges.push_back(m.is_string() ? m.get<std::string>()
                                   : m[0].get<std::string>() + " " + m[1].get<std::string>());
  }
  b.kv_string("tokenizer.ggml.model", "gpt2");
  b.kv_string("tokenizer.ggml.pre", "default");
  b.kv_string_array("tokenizer.ggml.tokens", tokens);
  b.kv_array<int32_t>("tokenizer.ggml.token_type", GgufBuilder::kI32, types);
  b.kv_string_array("tokenizer.ggml.merges", merges);
  if (c.bos_token_id) {
    b.kv<uint32_t>("tokenizer.ggml.bos_token_id", GgufBuilder::kU32,
                   static_cast<uint32_t>(*c.bos_token_id));
  }
  b.kv<uint8_t>("tokenizer.ggml.add_bos_token", GgufBuilder::kBool, 1);
  b.kv_string("tokenizer.chat_template", "{{ messages[0].content }}");

  if (c.rope_scaling.type == "llama3") {
    // convert_hf_to_gguf (LlamaModel.generate_extra_tensors): one divisor per frequency.
    const RopeScalingConfig& r = c.rope_scaling;
    const double old_context = static_cast<double>(r.original_max_position_embeddings);
    std::vector<float> factors;
    for (int64_t i = 0; i < c.head_dim; i += 2) {
      const double freq = 1.0 / std::pow(c.rope_theta, static_cast<double>(i) / c.head_dim);
      const double wavelen = 2 * std::numbers::pi / freq;
      if (wavelen < old_context / r.high_freq_factor) {
        factors.push_back(1.0f);
      } else if (wavelen > old_context / r.low_freq_factor) {
        factors.push_back(static_cast<float>(r.factor));
      } else {
        const double smooth =
            (old_context / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
        factors.push_back(static_cast<float>(1 / ((1 - smooth) / r.factor + smooth)));
      }
    }
    b.tensor("rope_freqs.weight", {factors.size()}, kGgmlF32, as_bytes(factors));
  }
  for (const std::string& name : store.names()) {
    const Tensor& t = store.get(name);
    ASSERT_EQ(t.dtype, DType::kF32) << name;
    const int64_t cols = t.shape.back(), rows = t.num_elements() / cols;
    std::vector<float> data(t.data_as<float>(), t.data_as<float>() + t.num_elements());
    const bool is_q = name.find("q_proj") != std::string::npos;
    const bool is_k = name.find("k_proj") != std::string::npos;
    if (llama && (is_q || is_k)) {
      const int64_t heads = is_q ? c.num_attention_heads : c.num_key_value_heads;
      if (t.shape.size() == 2) {
        data = llama_cpp_permute(data.data(), rows, cols, heads);
      } else {
        data = llama_cpp_permute(data.data(), cols, 1, heads);  // a bias: one value per row
      }
    }
    std::vector<uint64_t> dims(t.shape.rbegin(), t.shape.rend());
    if (type != kGgmlF32 && t.shape.size() == 2 && name != "model.embed_tokens.weight") {
      std::vector<uint8_t> q;
      for (int64_t r = 0; r < rows; ++r) {
        const float* row_values = data.data() + r * cols;
        const auto row =
            type == kGgmlQ8_0 ? q8_0(row_values, cols) : q4(row_values, cols, type == kGgmlQ4_1);
        q.insert(q.end(), row.begin(), row.end());
      }
      b.tensor(gguf_name(name), dims, type, std::move(q));
    } else {
      b.tensor(gguf_name(name), dims, kGgmlF32, as_bytes(data));
    }
  }
  b.write(out);
}

// Logits of every position of `ids`, prefilled in one forward pass of `model` on `ctx`.
std::vector<float> prefill_logits(Model& model, const ExecutionContext& ctx,
                                  const std::vector<int32_t>& ids) {
  constexpr int32_t kBlockSize = 4;
  const int32_t num_blocks = static_cast<int32_t>((ids.size() + kBlockSize - 1) / kBlockSize);
  std::vector<int32_t> block_table;
  for (int32_t b = 0; b < num_blocks; ++b) block_table.push_back(num_blocks - 1 - b);
  const KvCacheSpec spec = model.kv_cache_spec();
  std::vector<float> memory(
      static_cast<size_t>(KvCache::bytes_needed(spec, num_blocks, kBlockSize) / 4 + 1));
  KvCache cache(spec, num_blocks, kBlockSize, memory.data());
  ForwardBatch batch;
  ForwardSequence fs;
  fs.num_tokens = static_cast<int32_t>(ids.size());
  fs.context_len = fs.num_tokens;
  fs.block_table = block_table.data();
  fs.needs_logits = true;
  fs.all_logits = true;
  for (int32_t p = 0; p < fs.num_tokens; ++p) {
    batch.token_ids.push_back(ids[static_cast<size_t>(p)]);
    batch.positions.push_back(p);
    batch.slot_mapping.push_back(
        static_cast<int64_t>(block_table[static_cast<size_t>(p / kBlockSize)]) * kBlockSize +
        p % kBlockSize);
  }
  batch.sequences.push_back(fs);
  std::vector<float> logits(static_cast<size_t>(batch.num_logit_rows() * model.vocab_size()));
  model.forward(ctx, batch, cache, logits.data());
  return logits;
}

// Logits of every position of `ids`, prefilled in one forward pass.
std::vector<float> all_logits(const ModelConfig& config, const TensorStore& store,
                              const std::vector<int32_t>& ids,
                              const ModelOptions& options = ModelOptions{}) {
  std::unique_ptr<Model> model = create_model(host_execution_context(), config, store, options);
  return prefill_logits(*model, host_execution_context(), ids);
}

// `ids` followed by `num_tokens` greedy tokens of `model` on `ctx`, and the logits of each
// step's last position, one after another; each step prefills the whole sequence again.
std::pair<std::vector<int32_t>, std::vector<float>> greedy_run(Model& model,
                                                               const ExecutionContext& ctx,
                                                               std::vector<int32_t> ids,
                                                               int num_tokens) {
  std::vector<float> last_logits;
  const auto vocab = static_cast<size_t>(model.vocab_size());
  for (int i = 0; i < num_tokens; ++i) {
    const std::vector<float> logits = prefill_logits(model, ctx, ids);
    const auto last = logits.end() - static_cast<std::ptrdiff_t>(vocab);
    last_logits.insert(last_logits.end(), last, logits.end());
    ids.push_back(static_cast<int32_t>(std::max_element(last, logits.end()) - last));
  }
  return {ids, last_logits};
}

ModelSpec tiny_spec(const std::string& architecture) {
  ModelSpec s = model_preset("tiny");
  s.architecture = architecture;
  s.dtype = DType::kF32;
  s.num_shards = 1;
  s.head_dim = 0;
  s.intermediate_size = 192;  // whole Q8_0 blocks in ffn_down's rows
  s.seed = 7;
  return s;
}

class GgufModelLogits : public ::testing::TestWithParam<const char*> {};

// A float GGUF converted from a model generated with `spec` gives its logits and tokens.
void expect_float_gguf_matches(const ModelSpec& spec) {
  TempDir dir;
  const std::string hf = dir.file("hf"), gguf = dir.file("model.gguf");
  generate_model(spec, hf);
  convert_to_gguf(hf, gguf, kGgmlF32);

  GgufModel g = open_gguf_model(gguf);
  const ModelConfig hf_config = ModelConfig::from_dir(hf);
  const TensorStore hf_store = TensorStore::open(hf);
  EXPECT_EQ(g.config.architecture, hf_config.architecture);
  EXPECT_EQ(g.config.hidden_size, hf_config.hidden_size);
  EXPECT_EQ(g.config.num_key_value_heads, hf_config.num_key_value_heads);
  EXPECT_EQ(g.config.vocab_size, hf_config.vocab_size);
  EXPECT_EQ(g.config.attention_bias, hf_config.attention_bias);
  EXPECT_EQ(g.config.rope_scaling.type, hf_config.rope_scaling.type);
  EXPECT_EQ(g.config.rope_scaling.factor, hf_config.rope_scaling.factor);
  EXPECT_EQ(g.config.rope_scaling.original_max_position_embeddings,
            hf_config.rope_scaling.original_max_position_embeddings);
  EXPECT_EQ(g.chat_template, "{{ messages[0].content }}");

  const bool llama = spec.architecture == "LlamaForCausalLM";
  if (llama) {  // the file really holds permuted rows, so matching logits prove the undo
    const GgufFile raw(gguf);
    const Tensor& q = hf_store.get("model.layers.0.self_attn.q_proj.weight");
    EXPECT_NE(std::memcmp(raw.find_tensor("blk.0.attn_q.weight")->data, q.data,
                          static_cast<size_t>(q.size_bytes)),
              0);
  }

  const std::vector<int32_t> ids = {1, 17, 300, 42, 99, 5, 250, 77, 3, 64, 128};
  const std::vector<float> want = all_logits(hf_config, hf_store, ids);
  const std::vector<float> got = all_logits(g.config, g.tensors, ids);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-5f + 1e-5f * std::fabs(want[i])) << "logit " << i;
  }

  // The tokenizer tokenizes as the directory's does.
  const Tokenizer hf_tok = Tokenizer::from_directory(hf);
  for (const char* text : {"Hello world, the quick brown fox.", "  spaces\tand\nlines 12345"}) {
    EXPECT_EQ(g.tokenizer.encode(text, true), hf_tok.encode(text, true)) << text;
  }
}

TEST_P(GgufModelLogits, FloatGgufMatchesHfDirectory) {
  expect_float_gguf_matches(tiny_spec(GetParam()));
}

// Llama 3.1-style rope scaling travels as the rope_freqs tensor and must come back as the same
// llama3 parameters (the smooth band covers some of the tiny model's frequencies).
TEST(GgufModel, Llama3RopeFreqsBecomeRopeScaling) {
  ModelSpec spec = tiny_spec("LlamaForCausalLM");
  spec.rope_scaling = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  spec.max_position_embeddings = 131072;
  expect_float_gguf_matches(spec);
}

TEST_P(GgufModelLogits, Q8_0GgufMatchesDequantizedWeights) {
  TempDir dir;
  const std::string hf = dir.file("hf"), gguf = dir.file("model.gguf");
  generate_model(tiny_spec(GetParam()), hf);
  convert_to_gguf(hf, gguf, kGgmlQ8_0);
  GgufModel g = open_gguf_model(gguf);
  const Tensor& q = g.tensors.get("model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ(q.dtype, DType::kI8);
  EXPECT_EQ(q.group_size, 32);

  // Reference: the HF model with every Q8_0 weight replaced by its dequantized values.
  const ModelConfig hf_config = ModelConfig::from_dir(hf);
  TensorStore reference = TensorStore::empty(hf);
  std::vector<std::shared_ptr<std::vector<float>>> buffers;
  for (const auto& [name, t] : g.tensors.tensors()) {
    auto values = std::make_shared<std::vector<float>>(static_cast<size_t>(t.num_elements()));
    const int64_t cols = t.shape.back(), rows = t.num_elements() / cols;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        float v;
        if (t.dtype == DType::kI8) {
          v = f16_to_f32(t.scales[r * (cols / 32) + c / 32]) *
              static_cast<int8_t>(t.data[r * cols + c]);
        } else {
          v = t.data_as<float>()[r * cols + c];
        }
        (*values)[static_cast<size_t>(r * cols + c)] = v;
      }
    }
    Tensor copy = t;
    copy.dtype = DType::kF32;
    copy.stored_dtype = "F32";
    copy.scales = nullptr;
    copy.group_size = 0;
    copy.data = reinterpret_cast<const uint8_t*>(values->data());
    copy.size_bytes = t.num_elements() * 4;
    reference.add(std::move(copy), values);
  }
  const std::vector<int32_t> ids = {1, 17, 300, 42, 99, 5, 250, 77};
  const std::vector<float> want = all_logits(hf_config, reference, ids);
  float max_abs = 0;
  for (float v : want) max_abs = std::max(max_abs, std::fabs(v));
  // Weight-only (fp32 activations): the same weights through the int8 kernel, so only
  // summation order differs.
  ModelOptions weight_only;
  weight_only.weights.int8_activations = false;
  const std::vector<float> got = all_logits(g.config, g.tensors, ids, weight_only);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-4f * max_abs + 1e-5f) << "logit " << i;
  }
  // W8A8 (the default): activations are quantized to int8 per 32 as well, which a random
  // two-layer model amplifies to a few percent of the largest logit (measured: 1.5-2.2%), so
  // only a loose bound here; the int8 kernels have their own tests against the scalar ones.
  const std::vector<float> w8a8 = all_logits(g.config, g.tensors, ids);
  float max_diff = 0;
  for (size_t i = 0; i < want.size(); ++i)
    max_diff = std::max(max_diff, std::fabs(w8a8[i] - want[i]));
  EXPECT_LE(max_diff, 6e-2f * max_abs);
  RecordProperty("w8a8_max_diff_over_max_logit", std::to_string(max_diff / max_abs));
  std::printf("W8A8 max |diff| / max |logit| = %.4f\n", max_diff / max_abs);
}

// On a table that reads lane panels (int8: x86 avx2; AArch64 neon_dotprod and neon_i8mm; int4:
// the AArch64 ones) an engine's GGUF Q8_0, Q4_0 (symmetric int4) or Q4_1 (int4 with zero points)
// model (WeightOptions::release_converted) has its matrices packed, the repacked rows let go of,
// and generates the same tokens, with the same logits bit for bit, as with the panels off; the
// embedding stays row-major in the store.
TEST_P(GgufModelLogits, QuantizedGgufIsPackedIntoLanePanelsWithTheSameTokens) {
  const ModelSpec spec = tiny_spec(GetParam());
  ModelOptions options;
  options.weights.release_converted = true;
  const std::vector<int32_t> prompt = {1, 17, 300, 42, 99};
  int num_runs = 0;
  for (const uint32_t type : {kGgmlQ8_0, kGgmlQ4_0, kGgmlQ4_1}) {
    const DType dtype = type == kGgmlQ8_0 ? DType::kI8 : DType::kI4;
    std::vector<const KernelTable*> tables;
    for (const char* isa : {"avx2", "avx512", "neon_dotprod", "neon_i8mm"}) {
      const KernelTable* t = kernels_for(isa);
      if (t != nullptr && t->lane_panel_layout(dtype)) tables.push_back(t);
    }
    if (tables.empty()) continue;
    TempDir dir;
    const std::string hf = dir.file("hf"), gguf = dir.file("model.gguf");
    generate_model(spec, hf);
    convert_to_gguf(hf, gguf, type);
    for (const KernelTable* table : tables) {
      ++num_runs;
      KernelTable row_major_table = *table;
      row_major_table.int8_lane_panels = {};
      row_major_table.int4_lane_panels = {};
      const ExecutionContext panels(cpu_device(), *table), rows(cpu_device(), row_major_table);
      const GgufModel packed = open_gguf_model(gguf), row_major = open_gguf_model(gguf);
      const std::unique_ptr<Model> packed_model =
          create_model(panels, packed.config, packed.tensors, options);
      const std::unique_ptr<Model> row_major_model =
          create_model(rows, row_major.config, row_major.tensors, options);
      int num_packed = 0;
      for (const auto& [name, t] : packed.tensors.tensors()) {
        if (t.dtype != dtype) continue;
        const bool embedding = name == "model.embed_tokens.weight";
        EXPECT_EQ(packed.tensors.holds_converted(name), embedding) << table->isa << " " << name;
        EXPECT_TRUE(row_major.tensors.holds_converted(name)) << name;
        num_packed += embedding ? 0 : 1;
      }
      EXPECT_EQ(num_packed, 7 * spec.num_layers + (spec.tie_word_embeddings ? 0 : 1));
      {  // What the model's loader hands its layers, on a store of its own.
        const GgufModel third = open_gguf_model(gguf);
        WeightLoader loader(third.tensors, options.weights, panels);
        const WeightView up = loader.matrix("model.layers.0.mlp.up_proj.weight",
                                            spec.intermediate_size, spec.hidden_size);
        EXPECT_NE(up.lane_panels, nullptr) << table->isa;
        EXPECT_EQ(up.data, nullptr);
        EXPECT_EQ(up.dtype, dtype);
        EXPECT_EQ(up.symmetric_int4, type == kGgmlQ4_0);
      }
      const auto [packed_ids, packed_logits] = greedy_run(*packed_model, panels, prompt, 8);
      const auto [row_major_ids, row_major_logits] = greedy_run(*row_major_model, rows, prompt, 8);
      EXPECT_EQ(packed_ids, row_major_ids) << table->isa << " type " << type;
      EXPECT_EQ(packed_logits, row_major_logits) << table->isa << " type " << type;
    }
  }
  if (num_runs == 0) GTEST_SKIP() << "no table here reads lane panels";
}

INSTANTIATE_TEST_SUITE_P(Architectures, GgufModelLogits,
                         ::testing::Values("LlamaForCausalLM", "Qwen2ForCausalLM"),
                         [](const auto& info) { return std::string(info.param).substr(0, 5); });

TEST(GgufModel, RealTinyRandomLlamaFileOpensAndRuns) {
  const std::string path = pagoda::test::testdata_dir().string() +
                           "/models/llama-2-tiny-random/llama-2-tiny-random.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "shared test data absent: " << path;
  GgufModel g = open_gguf_model(path);
  EXPECT_EQ(g.config.architecture, "LlamaForCausalLM");
  EXPECT_EQ(g.config.hidden_size, 8);
  EXPECT_EQ(g.config.num_attention_heads, 2);
  EXPECT_EQ(g.config.head_dim, 4);
  EXPECT_EQ(g.config.vocab_size, 32000);
  EXPECT_EQ(g.tokenizer.bos_id(), 1);
  EXPECT_EQ(g.tokenizer.encode("Hello", true).front(), 1);
  const std::vector<float> logits = all_logits(g.config, g.tensors, {1, 15043, 3186});
  ASSERT_EQ(logits.size(), 3u * 32000u);
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
}

// deepseek2 metadata as llama.cpp's converter writes it, in both generations of the layout; the
// logits of whole files are checked against PyTorch by tests/deepseek/check_deepseek.py.
GgufBuilder deepseek2_metadata(bool mla_layout, bool v3) {
  using B = GgufBuilder;
  GgufBuilder b;
  b.kv_string("general.architecture", "deepseek2");
  b.kv<uint32_t>("deepseek2.embedding_length", B::kU32, 64);
  b.kv<uint32_t>("deepseek2.feed_forward_length", B::kU32, 96);
  b.kv<uint32_t>("deepseek2.block_count", B::kU32, v3 ? 4 : 3);
  b.kv<uint32_t>("deepseek2.attention.head_count", B::kU32, 4);
  b.kv<float>("deepseek2.attention.layer_norm_rms_epsilon", B::kF32, 1e-6f);
  b.kv<uint32_t>("deepseek2.rope.dimension_count", B::kU32, 8);
  b.kv<uint32_t>("deepseek2.attention.kv_lora_rank", B::kU32, 32);
  if (mla_layout) {  // MQA over the latent; the MHA sizes as *_mla
    b.kv<uint32_t>("deepseek2.attention.head_count_kv", B::kU32, 1);
    b.kv<uint32_t>("deepseek2.attention.key_length", B::kU32, 40);
    b.kv<uint32_t>("deepseek2.attention.value_length", B::kU32, 32);
    b.kv<uint32_t>("deepseek2.attention.key_length_mla", B::kU32, 24);
    b.kv<uint32_t>("deepseek2.attention.value_length_mla", B::kU32, 12);
  } else {
    b.kv<uint32_t>("deepseek2.attention.head_count_kv", B::kU32, 4);
    b.kv<uint32_t>("deepseek2.attention.key_length", B::kU32, 24);
    b.kv<uint32_t>("deepseek2.attention.value_length", B::kU32, 12);
  }
  b.kv<uint32_t>("deepseek2.attention.q_lora_rank", B::kU32, v3 ? 16 : 0);
  b.kv<uint32_t>("deepseek2.expert_count", B::kU32, 8);
  b.kv<uint32_t>("deepseek2.expert_used_count", B::kU32, 2);
  b.kv<uint32_t>("deepseek2.expert_feed_forward_length", B::kU32, 24);
  b.kv<uint32_t>("deepseek2.expert_shared_count", B::kU32, 2);
  b.kv<uint32_t>("deepseek2.leading_dense_block_count", B::kU32, 1);
  b.kv<float>("deepseek2.expert_weights_scale", B::kF32, 2.5f);
  if (v3) {
    b.kv<uint32_t>("deepseek2.expert_gating_func", B::kU32, 2);
    b.kv<uint8_t>("deepseek2.expert_weights_norm", B::kBool, 1);
    b.kv<uint32_t>("deepseek2.expert_group_count", B::kU32, 4);
    b.kv<uint32_t>("deepseek2.expert_group_used_count", B::kU32, 2);
    b.kv<uint32_t>("deepseek2.nextn_predict_layers", B::kU32, 1);
    b.kv_string("deepseek2.rope.scaling.type", "yarn");
    b.kv<float>("deepseek2.rope.scaling.factor", B::kF32, 40.0f);
    b.kv<uint32_t>("deepseek2.rope.scaling.original_context_length", B::kU32, 4096);
    b.kv<float>("deepseek2.rope.scaling.yarn_log_multiplier", B::kF32, 0.1f);
    b.tensor("blk.1.exp_probs_b.bias", {8}, 0, std::vector<uint8_t>(32, 0));
  }
  b.tensor("token_embd.weight", {64, 97}, 0, std::vector<uint8_t>(64 * 97 * 4, 0));
  return b;
}

TEST(GgufModel, Deepseek2MetadataBecomesTheHfConfig) {
  TempDir dir;
  {
    deepseek2_metadata(/*mla_layout=*/false, /*v3=*/false).write(dir.file("v2.gguf"));
    const nlohmann::json c = gguf_config_json(GgufFile(dir.file("v2.gguf")));
    EXPECT_EQ(c["architectures"][0], "DeepseekV2ForCausalLM");
    EXPECT_EQ(c["num_key_value_heads"], 4);
    EXPECT_TRUE(c["q_lora_rank"].is_null());  // 0: queries not compressed (V2-Lite)
    EXPECT_EQ(c["kv_lora_rank"], 32);
    EXPECT_EQ(c["qk_nope_head_dim"], 16);
    EXPECT_EQ(c["qk_rope_head_dim"], 8);
    EXPECT_EQ(c["v_head_dim"], 12);
    EXPECT_EQ(c["num_hidden_layers"], 3);
    EXPECT_EQ(c["n_routed_experts"], 8);
    EXPECT_EQ(c["num_experts_per_tok"], 2);
    EXPECT_EQ(c["moe_intermediate_size"], 24);
    EXPECT_EQ(c["n_shared_experts"], 2);
    EXPECT_EQ(c["first_k_dense_replace"], 1);
    EXPECT_EQ(c["scoring_func"], "softmax");  // no gating key: the old files' softmax
    EXPECT_EQ(c["topk_method"], "greedy");
    EXPECT_FLOAT_EQ(c["routed_scaling_factor"].get<float>(), 2.5f);
    EXPECT_EQ(c["norm_topk_prob"], false);
  }
  {
    deepseek2_metadata(/*mla_layout=*/true, /*v3=*/true).write(dir.file("v3.gguf"));
    const nlohmann::json c = gguf_config_json(GgufFile(dir.file("v3.gguf")));
    EXPECT_EQ(c["architectures"][0], "DeepseekV3ForCausalLM");
    EXPECT_EQ(c["num_key_value_heads"], 4);  // not the file's 1: MLA's heads all read the latent
    EXPECT_EQ(c["q_lora_rank"], 16);
    EXPECT_EQ(c["qk_nope_head_dim"], 16);  // key_length_mla - rope, not key_length (40)
    EXPECT_EQ(c["v_head_dim"], 12);
    EXPECT_EQ(c["num_hidden_layers"], 3);  // block_count 4 includes the MTP layer
    EXPECT_EQ(c["num_nextn_predict_layers"], 1);
    EXPECT_EQ(c["scoring_func"], "sigmoid");
    EXPECT_EQ(c["topk_method"], "noaux_tc");
    EXPECT_EQ(c["n_group"], 4);
    EXPECT_EQ(c["topk_group"], 2);
    EXPECT_EQ(c["norm_topk_prob"], true);
    EXPECT_EQ(c["rope_scaling"]["type"], "yarn");
    EXPECT_NEAR(c["rope_scaling"]["mscale_all_dim"].get<double>(), 1.0, 1e-6);
    EXPECT_EQ(c["rope_scaling"]["original_max_position_embeddings"], 4096);
  }
  EXPECT_EQ(hf_tensor_name("blk.2.attn_kv_a_mqa.weight", "deepseek2"),
            "model.layers.2.self_attn.kv_a_proj_with_mqa.weight");
  EXPECT_EQ(hf_tensor_name("blk.2.exp_probs_b.bias", "deepseek2"),
            "model.layers.2.mlp.gate.e_score_correction_bias");
  EXPECT_EQ(hf_tensor_name("blk.2.ffn_gate_inp.weight", "deepseek2"),
            "model.layers.2.mlp.gate.weight");
  EXPECT_EQ(hf_tensor_name("blk.2.ffn_gate_exps.weight", "deepseek2"), "");  // split, not renamed
  EXPECT_EQ(hf_tensor_name("blk.2.attn_kv_a_mqa.weight", "llama"), "");
}

TEST(GgufModel, UnsupportedArchitectureAndUnknownTensorAreOneLineErrors) {
  TempDir dir;
  GgufBuilder b;
  b.kv_string("general.architecture", "mamba");
  b.write(dir.file("m.gguf"));
  expect_message(error_of([&] { open_gguf_model(dir.file("m.gguf")); }),
                 {dir.file("m.gguf"), "general.architecture 'mamba' is not supported"});

  EXPECT_EQ(hf_tensor_name("blk.12.ffn_down.weight"), "model.layers.12.mlp.down_proj.weight");
  EXPECT_EQ(hf_tensor_name("output.weight"), "lm_head.weight");
  EXPECT_EQ(hf_tensor_name("blk.0.attn_q_norm.weight"), "");
  EXPECT_EQ(hf_tensor_name("blk.x.attn_q.weight"), "");
  EXPECT_EQ(hf_tensor_name("blk..attn_q.weight"), "");
  EXPECT_TRUE(is_gguf_path("/m/x.gguf"));
  EXPECT_FALSE(is_gguf_path("/m/dir"));
}

}  // namespace
}  // namespace pagoda
