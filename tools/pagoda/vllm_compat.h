// `vllm serve`'s command line and environment on `pagoda serve`, so that a deployment moves
// over unchanged: the positional model, the parallelism sizes (-tp is an engine option,
// -pp too, tensor_parallel_launch.h; data parallelism must be 1), the flags with a meaning
// here, the GPU-only ones accepted with a warning that names them inert, and VLLM_API_KEY. The
// engine-level variables (VLLM_CPU_KVCACHE_SPACE, VLLM_CPU_OMP_THREADS_BIND, ...) are read by
// EngineFlags (engine_options.h); `--config FILE.yaml` by expand_config_file (vllm_config_file.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "server/http_server.h"
#include "tools/pagoda/engine_options.h"

namespace pagoda::cli {

struct VllmServeFlags {
  std::string model_tag;    // `pagoda serve MODEL`
  std::string config_file;  // --config: read by expand_config_file() before parsing
  int data_parallel_size = 1;
  std::string dtype = "auto";
  std::string device = "auto";
  std::string load_format = "auto";
  std::optional<uint64_t> seed;
  bool enable_log_requests = false;
  int max_logprobs = 20;
  std::string generation_config = "auto";
  bool return_tokens_as_token_ids = false;
  std::string chat_template_content_format = "auto";
  std::string response_role = "assistant";
  std::vector<std::string> inert_values;  // where the inert options' values land
  bool inert_switch = false;              // where the inert flags land
};

// vLLM's -tp, -pp and -dp (and -tp=N) as their long names, in place; call before parsing.
void expand_vllm_short_flags(std::vector<std::string>& args);

void add_vllm_serve_options(CLI::App* serve, VllmServeFlags& flags);

// After parsing and once logging is set up: checks the vLLM flags, folds them and VLLM_API_KEY
// into the engine and server options, and logs one warning per inert flag given and one per
// VLLM_* variable set that Pagoda does not honour. Throws pagoda::Error.
void apply_vllm_serve_options(const CLI::App& serve, const VllmServeFlags& flags,
                              EngineFlags& engine, server::ServerOptions& server,
                              bool& disable_log_requests);

}  // namespace pagoda::cli
