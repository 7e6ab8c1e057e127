// `pagoda info`: what a model directory or GGUF file holds and what serving it costs in memory:
// the shape (the family's own part from its descriptor, e.g. DeepSeek's MLA and mixture-of-experts
// layout), the weights' stored format, and the KV cache at the dtype the engine would use.
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "demo/model_generator.h"
#include "hub/resolve_model.h"
#include "kernels/host_context.h"
#include "kernels/kernels.h"
#include "loader/safetensors.h"
#include "loader/weight_format.h"
#include "model/kv_cache.h"
#include "model/model_config.h"
#include "model/model_family.h"
#include "model/model_registry.h"
#include "model/model_source.h"
#include "tools/pagoda/commands.h"
#include "tools/pagoda/model_key_options.h"
#include "util/cpu_features.h"
#include "util/units.h"

namespace pagoda::cli {
namespace {

struct InfoFlags {
  std::string model;
  std::string kv_cache_dtype = "auto";
  ModelKeyFlags model_key;
};

// The name a --kv-cache-dtype value resolves to ("auto" is the engine's fp16).
const char* kv_dtype_label(DType dtype) {
  return dtype == DType::kF32 ? "fp32" : dtype == DType::kBF16 ? "bf16" : "fp16";
}

int run_info(const InfoFlags& f) {
  // stdout is the report; the loader's info lines (e.g. skipped MTP layers) would interleave.
  spdlog::set_level(spdlog::level::warn);
  // "demo" names the built-in random model unless a directory of that name exists (as in the
  // engine).
  const std::string path = f.model == "demo" && !std::filesystem::exists(f.model)
                               ? ensure_demo_model()
                               : hub::resolve_model(f.model);  // org/name: docs/models.md
  const crypto::ModelKeySource key_source = model_key_source(f.model_key);
  const std::optional<crypto::ModelKey> key =
      key_source.empty() ? std::nullopt : std::optional(crypto::load_model_key(key_source));
  const ModelSource source =
      open_model_source(path, "", FileMemory::kMap, nullptr, key ? &*key : nullptr);
  const ModelConfig& config = source.config;
  ModelOptions options;
  options.max_num_batched_tokens = 1;
  const auto model = create_model(host_execution_context(), config, source.tensors, options);
  KvCacheSpec kv = model->kv_cache_spec();
  kv.dtype = parse_kv_cache_dtype(f.kv_cache_dtype);  // as the engine sets it
  const int64_t kv_per_token = kv.bytes_per_token();

  fmt::print("model:              {}\n", path);
  fmt::print("architecture:       {}\n", config.architecture);
  fmt::print("layers:             {}\n", config.num_hidden_layers);
  fmt::print("hidden size:        {}\n", config.hidden_size);
  fmt::print("{}", model_family_of(config).describe(config));
  fmt::print("vocabulary:         {}\n", config.vocab_size);
  fmt::print("context length:     {}\n", config.max_position_embeddings);
  fmt::print("rope scaling:       {}\n", config.rope_scaling.type);
  fmt::print("parameters:         {} ({:.2f} B)\n", model->num_parameters(),
             model->num_parameters() / 1e9);
  fmt::print("weight format:      {}\n", describe_weight_format(source.tensors));
  fmt::print("weight bytes:       {}\n",
             format_bytes(static_cast<uint64_t>(model->weight_bytes())));
  fmt::print("KV cache dtype:     {} (--kv-cache-dtype {})\n", kv_dtype_label(kv.dtype),
             f.kv_cache_dtype);
  fmt::print("KV bytes per token: {}\n", format_bytes(static_cast<uint64_t>(kv_per_token)));
  fmt::print("KV for one full context: {}\n",
             format_bytes(static_cast<uint64_t>(kv_per_token * config.max_position_embeddings)));
  fmt::print("cpu:                {}\n", cpu_features().describe());
  fmt::print("kernels:            {}\n", kernels().isa);
  return 0;
}

}  // namespace

Command register_info(CLI::App& app) {
  auto flags = std::make_shared<InfoFlags>();
  CLI::App* sub = app.add_subcommand(
      "info", "Architecture, MLA/MoE layout, parameters, weight format, weight and KV bytes");
  sub->add_option("--model", flags->model, "Hugging Face model directory, a .gguf file, or 'demo'")
      ->required();
  sub->add_option("--kv-cache-dtype", flags->kv_cache_dtype,
                  "KV cache element type to size for: auto (fp16, the engine's default), fp32, "
                  "fp16 or bf16")
      ->check(CLI::IsMember(kv_cache_dtype_names()))
      ->capture_default_str();
  add_model_key_options(sub, flags->model_key);
  return [flags] { return run_info(*flags); };
}

}  // namespace pagoda::cli
