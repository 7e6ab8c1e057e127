#include "tools/pagoda/vllm_compat.h"

#include <spdlog/spdlog.h>

#include "model/gguf_model.h"
#include "util/error.h"

namespace pagoda::cli {
namespace {

// vLLM flags that only mean something on a GPU or in vLLM's Python runtime: accepted, so that a
// vLLM command line starts, and named in a warning with what Pagoda does instead.
struct InertFlag {
  const char* name;
  bool takes_value;
  const char* why;
};
constexpr InertFlag kInertFlags[] = {
    {"--gpu-memory-utilization", true,
     "there is no GPU; the KV cache is sized by --kv-cache-space (or VLLM_CPU_KVCACHE_SPACE)"},
    {"--swap-space", true, "preempted requests are recomputed, not swapped"},
    {"--enforce-eager", false, "there are no CUDA graphs on a CPU"},
    {"--trust-remote-code", false,
     "Pagoda runs no code from the model directory; its architectures are built in"},
    {"--download-dir", true, "models load from local paths only"},
    {"--distributed-executor-backend", true, "one process serves the model"},
    {"--uvicorn-log-level", true, "HTTP logging follows --log-level"},
};

void check_parallel_size(const char* flag, int size, const char* what) {
  if (size < 1) fail("{} must be at least 1, got {}", flag, size);
  if (size > 1) {
    fail(
        "{} {}: {} is not available yet; Pagoda serves on one process (use {} 1, or leave "
        "it out)",
        flag, size, what, flag);
  }
}

}  // namespace

void expand_vllm_short_flags(std::vector<std::string>& args) {
  // argparse takes multi-letter single-dash names; CLI11 does not, so spell them out.
  static const std::pair<const char*, const char*> kShort[] = {
      {"-tp", "--tensor-parallel-size"},
      {"-pp", "--pipeline-parallel-size"},
      {"-dp", "--data-parallel-size"},
  };
  for (std::string& arg : args) {
    for (const auto& [short_name, long_name] : kShort) {
      const std::string prefix = std::string(short_name) + "=";
      if (arg == short_name)
        arg = long_name;
      else if (arg.rfind(prefix, 0) == 0)
        arg = long_name + arg.substr(prefix.size() - 1);
    }
  }
}

void add_vllm_serve_options(CLI::App* serve, VllmServeFlags& f) {
  serve->add_option("model_tag", f.model_tag,
                    "The model, as `vllm serve MODEL` takes it (same as --model)");
  const std::pair<const char*, int*> sizes[] = {
      {"--tensor-parallel-size", &f.tensor_parallel_size},
      {"--pipeline-parallel-size", &f.pipeline_parallel_size},
      {"--data-parallel-size", &f.data_parallel_size},
  };
  for (const auto& [name, size] : sizes) {
    serve->add_option(name, *size, "1 (parallelism is not available yet)")->capture_default_str();
  }
  serve
      ->add_option("--dtype", f.dtype,
                   "vLLM's compute dtype; Pagoda computes in fp32 on weights as stored, so "
                   "only auto changes nothing silently")
      ->check(CLI::IsMember({"auto", "half", "float16", "bfloat16", "float", "float32"}))
      ->capture_default_str();
  serve->add_option("--device", f.device, "auto or cpu")
      ->check(CLI::IsMember({"auto", "cpu"}))
      ->capture_default_str();
  serve
      ->add_option("--load-format", f.load_format,
                   "auto, safetensors or gguf (Pagoda tells them apart by the path)")
      ->check(CLI::IsMember({"auto", "safetensors", "gguf"}))
      ->capture_default_str();
  serve->add_option("--seed", f.seed, "Seed for requests that set none (as --engine-seed)");
  serve->add_flag("--enable-log-requests", f.enable_log_requests,
                  "A log line per finished request (the default; see --disable-log-requests)");
  for (const InertFlag& flag : kInertFlags) {
    const std::string help = std::string("Accepted for vLLM, no effect: ") + flag.why;
    if (flag.takes_value) {
      serve->add_option(flag.name, f.inert_values, help)
          ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    } else {
      serve->add_flag(flag.name, f.inert_switch, help);
    }
  }
}

void apply_vllm_serve_options(const CLI::App& serve, const VllmServeFlags& f, EngineFlags& engine,
                              server::ServerOptions& server, bool& disable_log_requests) {
  if (!f.model_tag.empty()) {
    if (!engine.args.model.empty() && engine.args.model != f.model_tag) {
      fail("two models given: '{}' and --model '{}'", f.model_tag, engine.args.model);
    }
    engine.args.model = f.model_tag;
  }
  check_parallel_size("--tensor-parallel-size", f.tensor_parallel_size, "tensor parallelism");
  check_parallel_size("--pipeline-parallel-size", f.pipeline_parallel_size, "pipeline parallelism");
  check_parallel_size("--data-parallel-size", f.data_parallel_size, "data parallelism");
  if (f.dtype != "auto") {
    spdlog::warn(
        "--dtype {} has no effect: Pagoda computes in fp32 with the weights as stored "
        "(quantize them with --quantization)",
        f.dtype);
  }
  const std::string& model = engine.args.model;
  const bool gguf_path = is_gguf_path(model);
  if ((f.load_format == "gguf" && !gguf_path) || (f.load_format == "safetensors" && gguf_path)) {
    fail("--load-format {} does not match the model '{}'", f.load_format, model);
  }
  if (f.seed) engine.args.seed = *f.seed;
  if (f.enable_log_requests && disable_log_requests) {
    fail("--enable-log-requests and --disable-log-requests contradict each other");
  }
  for (const InertFlag& flag : kInertFlags) {
    if (serve.count(flag.name) > 0) spdlog::warn("{} has no effect: {}", flag.name, flag.why);
  }
  if (engine.served_model_names.size() > 1) {
    server.model_aliases.assign(engine.served_model_names.begin() + 1,
                                engine.served_model_names.end());
  }
  // --api-key, then PAGODA_API_KEY (the option's envname), then vLLM's variable.
  if (server.api_key.empty()) {
    server.api_key = environment("VLLM_API_KEY");
    if (!server.api_key.empty()) spdlog::info("API key from VLLM_API_KEY");
  }
}

}  // namespace pagoda::cli
