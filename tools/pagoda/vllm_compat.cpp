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
    {"--distributed-executor-backend", true, "one process serves the model"},
    {"--uvicorn-log-level", true, "HTTP logging follows --log-level"},
};

// The VLLM_* variables Pagoda reads (or that ask for what Pagoda always does); any other one set
// gets a warning, so that a deployment never believes a variable took effect when it did not.
struct VllmVariable {
  const char* name;
  const char* note;  // honoured: what it stands for; not applicable: why
};
constexpr VllmVariable kHonouredVariables[] = {
    {"VLLM_API_KEY", "--api-key"},
    {"VLLM_CPU_KVCACHE_SPACE", "--kv-cache-space"},
    {"VLLM_CPU_OMP_THREADS_BIND", "--cpu-bind"},
    {"VLLM_CPU_NUM_OF_RESERVED_CPU", "--num-reserved-cpus"},
    {"VLLM_LOGGING_LEVEL", "--log-level"},
    {"VLLM_USE_MODELSCOPE", "models by name come from ModelScope (docs/models.md)"},
    {"VLLM_HTTP_TIMEOUT_KEEP_ALIVE", "--http-keep-alive-timeout"},
    {"VLLM_ALLOW_LONG_MAX_MODEL_LEN", "PAGODA_ALLOW_LONG_MAX_MODEL_LEN"},
    {"VLLM_NO_USAGE_STATS", "Pagoda collects no usage stats"},
    {"VLLM_DO_NOT_TRACK", "Pagoda collects no usage stats"},
};

// Set variables that mean something to vLLM and nothing here, with why.
constexpr VllmVariable kInapplicableVariables[] = {
    {"VLLM_TARGET_DEVICE", "it is a setting of vLLM's build; Pagoda runs on the CPU"},
    {"VLLM_HOST_IP", "it is the address of a node in vLLM's multi-node setup; use --host"},
    {"VLLM_PORT", "it is a port of vLLM's multi-node setup, not the API's; use --port"},
    {"VLLM_CPU_MOE_PREPACK", "Pagoda packs MoE weights for its own kernels at load"},
    {"VLLM_CPU_SGL_KERNEL", "Pagoda has its own kernels (see --isa)"},
    {"VLLM_USE_V1", "Pagoda has one engine"},
    {"VLLM_ATTENTION_BACKEND", "Pagoda has one CPU attention"},
    {"VLLM_WORKER_MULTIPROC_METHOD", "one process serves the model"},
    {"VLLM_ENABLE_V1_MULTIPROCESSING", "one process serves the model"},
};

extern "C" char** environ;

void warn_about_unhonoured_variables() {
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string variable(*entry);
    if (variable.rfind("VLLM_", 0) != 0) continue;
    const std::string name = variable.substr(0, variable.find('='));
    bool honoured = false;
    for (const VllmVariable& v : kHonouredVariables) honoured |= name == v.name;
    if (honoured) continue;
    const char* why = "Pagoda does not read it";
    for (const VllmVariable& v : kInapplicableVariables) {
      if (name == v.name) why = v.note;
    }
    spdlog::warn("{} is set but has no effect: {}", name, why);
  }
}

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
  serve->add_option("--config", f.config_file,
                    "YAML file of options in vLLM's form (`max-model-len: 4096`, `enforce-eager: "
                    "true`, lists for multi-value options); the command line wins");
  serve
      ->add_option("--data-parallel-size", f.data_parallel_size,
                   "1 (data parallelism is not available yet)")
      ->capture_default_str();
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
  serve
      ->add_option("--max-logprobs", f.max_logprobs,
                   "Most logprobs, top_logprobs or prompt_logprobs a request may ask for (more: "
                   "400); -1: the vocabulary")
      ->capture_default_str();
  serve
      ->add_option("--generation-config", f.generation_config,
                   "Default sampling settings: auto (the model's generation_config.json), vllm "
                   "(vLLM's defaults) or a directory holding a generation_config.json")
      ->capture_default_str();
  serve->add_flag("--return-tokens-as-token-ids", f.return_tokens_as_token_ids,
                  "Write logprob tokens as 'token_id:N' (for tokens that are no text alone)");
  serve
      ->add_option("--chat-template-content-format", f.chat_template_content_format,
                   "How message content reaches the chat template: string (text parts joined), "
                   "openai (a list of {type, text} parts) or auto (openai when the template "
                   "loops over a message's content)")
      ->check(CLI::IsMember({"auto", "string", "openai"}))
      ->capture_default_str();
  serve
      ->add_option("--response-role", f.response_role,
                   "Role of the chat answer when the request adds a generation prompt")
      ->capture_default_str();
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
  check_parallel_size("--data-parallel-size", f.data_parallel_size, "data parallelism");
  if (f.dtype != "auto") {
    spdlog::warn(
        "--dtype {} has no effect: Pagoda computes in fp32 with the weights as stored "
        "(quantize them with --quantization)",
        f.dtype);
  }
  const std::string& model = engine.args.model;
  const bool gguf_path = is_gguf_path(model) || model.find(':') != std::string::npos ||
                         !engine.args.gguf_file.empty();  // org/name:Q4_K_M
  if ((f.load_format == "gguf" && !gguf_path) || (f.load_format == "safetensors" && gguf_path)) {
    fail("--load-format {} does not match the model '{}'", f.load_format, model);
  }
  if (f.seed) engine.args.seed = *f.seed;
  if (f.max_logprobs < -1) fail("--max-logprobs must be -1 or at least 0, got {}", f.max_logprobs);
  engine.args.max_logprobs = f.max_logprobs;
  server.protocol.max_logprobs = f.max_logprobs;
  engine.args.generation_config = f.generation_config;
  engine.args.chat_template_content_format = f.chat_template_content_format;
  if (f.response_role.empty()) fail("--response-role must not be empty");
  server.protocol.response_role = f.response_role;
  server.protocol.return_tokens_as_token_ids = f.return_tokens_as_token_ids;
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
  warn_about_unhonoured_variables();
  // --api-key, then PAGODA_API_KEY (the option's envname), then vLLM's variable.
  if (server.api_key.empty()) {
    server.api_key = environment("VLLM_API_KEY");
    if (!server.api_key.empty()) spdlog::info("API key from VLLM_API_KEY");
  }
}

}  // namespace pagoda::cli
