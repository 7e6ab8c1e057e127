// `pagoda bench quality`: what quantization costs in accuracy. The float model and its
// quantized twin (quantized at load, or a `pagoda quantize` checkpoint given as --candidate),
// or the same model on a 16-bit KV cache (--kv-cache-dtype), read the same text; at every position
// the KL divergence of their next-token distributions is taken (llama.cpp's perplexity tool calls
// it KLD), with top-1 agreement alongside.
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernels/host_context.h"
#include "loader/safetensors.h"
#include "model/kv_cache.h"
#include "model/logit_divergence.h"
#include "model/model_config.h"
#include "model/model_registry.h"
#include "tokenizer/tokenizer.h"
#include "tools/pagoda/commands.h"
#include "util/error.h"

namespace pagoda::cli {
namespace {

// The default text: plain English prose of a few hundred tokens, so results are comparable
// between runs and models without shipping a corpus.
constexpr const char* kDefaultText =
    "The lighthouse keeper rose before dawn, as he had every morning for thirty years. He climbed "
    "the spiral stairs with a lantern in one hand and a cup of tea in the other, counting the "
    "steps out of habit rather than need. At the top he wiped the salt from the great lens, "
    "checked the wick, and looked out over the grey water. Ships were fewer now than when he "
    "was young; most of them carried machines that told them where the rocks were. Still, on "
    "nights of heavy fog, a small fishing boat would sometimes appear out of the murk, its crew "
    "shouting and waving, and he would know that the light had done its work once more. In the "
    "afternoons he mended nets for the village, read old newspapers that the supply boat brought "
    "each month, and wrote letters to a sister who lived in the city and rarely wrote back. He "
    "did not mind. The sea was company enough, and the gulls, and the slow turning of the beam "
    "across the water, which he had come to think of as a kind of breathing. When the inspector "
    "came to tell him that the light would be automated next spring, he nodded, poured two cups "
    "of tea, and asked whether the new machine would need someone to keep the glass clean.";

struct QualityFlags {
  std::string model;
  std::string candidate;
  std::string quantization;
  std::string fp8_weights;  // an FP8 --model converted this way, against its exact dequantization
  int64_t group_size = 0;
  bool weight_only = false;
  std::string kv_cache_dtype = "fp32";
  std::string text_file;
  int64_t max_tokens = 512;
  bool json = false;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("{}: cannot open", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int run_quality(const QualityFlags& f) {
  const DType kv_dtype = parse_kv_cache_dtype(f.kv_cache_dtype);
  if (!f.candidate.empty() + !f.quantization.empty() + !f.fp8_weights.empty() > 1) {
    fail(
        "give at most one of --quantization (quantize --model at load), --fp8-weights or "
        "--candidate DIR");
  }
  if (f.candidate.empty() && f.quantization.empty() && f.fp8_weights.empty() &&
      kv_dtype == DType::kF32) {
    fail(
        "nothing to compare: give --quantization, --fp8-weights, --candidate DIR or "
        "--kv-cache-dtype fp16|bf16");
  }
  const ModelConfig config = ModelConfig::from_dir(f.model);
  // An FP8 reference is its exact dequantization (loader/fp8_checkpoint.h).
  const TensorStore store =
      TensorStore::open(f.model, FileMemory::kMap, nullptr, nullptr, Fp8Weights::kDequant);
  const Tokenizer tokenizer = Tokenizer::from_directory(f.model);
  std::vector<int32_t> tokens =
      tokenizer.encode(f.text_file.empty() ? kDefaultText : read_text(f.text_file), true);
  if (static_cast<int64_t>(tokens.size()) > f.max_tokens) tokens.resize(f.max_tokens);

  ModelOptions ref_options;
  ref_options.max_num_batched_tokens = static_cast<int64_t>(tokens.size());
  const auto reference = create_model(host_execution_context(), config, store, ref_options);

  ModelOptions cand_options = ref_options;
  std::unique_ptr<TensorStore> cand_store;
  std::unique_ptr<Model> candidate;
  std::string label;
  if (!f.candidate.empty()) {
    cand_store = std::make_unique<TensorStore>(TensorStore::open(f.candidate));
    candidate = create_model(host_execution_context(), ModelConfig::from_dir(f.candidate),
                             *cand_store, cand_options);
    label = f.candidate;
  } else if (!f.fp8_weights.empty()) {
    cand_store = std::make_unique<TensorStore>(TensorStore::open(
        f.model, FileMemory::kMap, nullptr, nullptr, parse_fp8_weights(f.fp8_weights)));
    cand_options.weights.int8_activations = !f.weight_only;
    candidate = create_model(host_execution_context(), config, *cand_store, cand_options);
    label = fmt::format("fp8 as {}{}", f.fp8_weights,
                        f.weight_only ? " weight-only" : " (int8 activations)");
  } else if (!f.quantization.empty()) {
    cand_options.weights.quantize_to = parse_quantization(f.quantization);
    cand_options.weights.group_size = f.group_size;
    cand_options.weights.int8_activations = !f.weight_only;
    candidate = create_model(host_execution_context(), config, store, cand_options);
    label = fmt::format("{}{}{}", f.quantization,
                        f.group_size > 0 ? fmt::format(" g{}", f.group_size) : "",
                        f.weight_only ? " weight-only" : " (int8 activations)");
  } else {
    label = "the same weights";
  }
  Model& cand = candidate ? *candidate : *reference;
  if (kv_dtype != DType::kF32) label += fmt::format(", {} KV cache", dtype_name(kv_dtype));
  const LogitDivergence d = compare_next_token_distributions(*reference, cand, tokens, kv_dtype);
  if (f.json) {
    const nlohmann::json out = {{"model", f.model},
                                {"candidate", label},
                                {"num_positions", d.num_positions},
                                {"mean_kl", d.mean_kl},
                                {"max_kl", d.max_kl},
                                {"top1_agreement", d.top1_agreement},
                                {"mean_abs_logit_diff", d.mean_abs_logit_diff},
                                {"reference_weight_bytes", reference->weight_bytes()},
                                {"candidate_weight_bytes", cand.weight_bytes()}};
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    fmt::print("model:            {}\n", f.model);
    fmt::print("candidate:        {}\n", label);
    fmt::print("positions:        {}\n", d.num_positions);
    fmt::print("mean KL:          {:.6f} nats (max {:.6f})\n", d.mean_kl, d.max_kl);
    fmt::print("top-1 agreement:  {:.2f}%\n", 100.0 * d.top1_agreement);
    fmt::print("mean |dlogit|:    {:.5f}\n", d.mean_abs_logit_diff);
    fmt::print("weight bytes:     {} -> {} ({:.2f}x smaller)\n", reference->weight_bytes(),
               cand.weight_bytes(),
               static_cast<double>(reference->weight_bytes()) / cand.weight_bytes());
  }
  return 0;
}

}  // namespace

Command register_bench_quality(CLI::App& app) {
  auto f = std::make_shared<QualityFlags>();
  CLI::App* sub = bench_command(app)->add_subcommand(
      "quality", "KL divergence of a quantized model's next-token distributions vs the float one");
  sub->add_option("--model", f->model, "Float model directory (the reference)")->required();
  sub->add_option("--quantization", f->quantization, "Quantize --model at load: int8 or int4")
      ->check(CLI::IsMember({"int8", "int4"}));
  sub->add_option("--fp8-weights", f->fp8_weights,
                  "An FP8 --model converted to int8 or int4, against its exact dequantization")
      ->check(CLI::IsMember({"int8", "int4"}));
  sub->add_option("--group-size", f->group_size, "Values per scale (multiple of 32)");
  sub->add_flag("--weight-only", f->weight_only, "Keep fp32 activations (no int8 activations)");
  sub->add_option("--candidate", f->candidate, "A quantized checkpoint directory instead");
  sub->add_option("--kv-cache-dtype", f->kv_cache_dtype,
                  "KV cache of the candidate: fp32, fp16 or bf16 (the reference keeps fp32)")
      ->check(CLI::IsMember(kv_cache_dtype_names()))
      ->capture_default_str();
  sub->add_option("--text", f->text_file, "Text file to read (default: a built-in passage)");
  sub->add_option("--max-tokens", f->max_tokens, "Positions compared")->capture_default_str();
  sub->add_flag("--json", f->json, "Print JSON");
  add_bench_runner(sub, [f] { return run_quality(*f); });
  return [] { return 0; };
}

}  // namespace pagoda::cli
