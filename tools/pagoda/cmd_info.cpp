// `pagoda info`: what a model directory holds and what serving it costs in memory.
#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "kernels/kernels.h"
#include "loader/safetensors.h"
#include "model/model_config.h"
#include "model/model_generator.h"
#include "model/model_registry.h"
#include "model/model_source.h"
#include "tools/pagoda/commands.h"
#include "util/cpu_features.h"
#include "util/units.h"

namespace pagoda::cli {
namespace {

int run_info(const std::string& model_arg) {
  const std::string dir = model_arg == "demo" ? ensure_demo_model() : model_arg;
  const ModelSource source = open_model_source(dir);
  const ModelConfig& config = source.config;
  const TensorStore& store = source.tensors;
  ModelOptions options;
  options.max_num_batched_tokens = 1;
  const auto model = create_model(config, store, options);
  const KvCacheSpec kv = model->kv_cache_spec();
  const int64_t kv_per_token = kv.bytes_per_token();
  fmt::print("model:              {}\n", dir);
  fmt::print("architecture:       {}\n", config.architecture);
  fmt::print("layers:             {}\n", config.num_hidden_layers);
  fmt::print("hidden size:        {}\n", config.hidden_size);
  fmt::print("attention heads:    {} (kv heads {}, head dim {})\n", config.num_attention_heads,
             config.num_key_value_heads, config.head_dim);
  fmt::print("vocabulary:         {}\n", config.vocab_size);
  fmt::print("context length:     {}\n", config.max_position_embeddings);
  fmt::print("rope scaling:       {}\n", config.rope_scaling.type);
  fmt::print("parameters:         {} ({:.2f} B)\n", model->num_parameters(),
             model->num_parameters() / 1e9);
  fmt::print("dtype:              {} (config torch_dtype)\n", dtype_name(config.torch_dtype));
  fmt::print("weight bytes:       {}\n",
             format_bytes(static_cast<uint64_t>(model->weight_bytes())));
  fmt::print("KV bytes per token: {} (fp32 cache)\n",
             format_bytes(static_cast<uint64_t>(kv_per_token)));
  fmt::print("KV for one full context: {}\n",
             format_bytes(static_cast<uint64_t>(kv_per_token * config.max_position_embeddings)));
  fmt::print("cpu:                {}\n", cpu_features().describe());
  fmt::print("kernels:            {}\n", isa_name(kernels().isa));
  return 0;
}

}  // namespace

Command register_info(CLI::App& app) {
  auto model = std::make_shared<std::string>();
  CLI::App* sub =
      app.add_subcommand("info", "Architecture, parameters, dtype, weight and KV bytes");
  sub->add_option("--model", *model, "Hugging Face model directory, a .gguf file, or 'demo'")
      ->required();
  return [model] { return run_info(*model); };
}

}  // namespace pagoda::cli
