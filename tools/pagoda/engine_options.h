// Engine and sampling flags shared by `generate`, `chat`, `serve` and `bench`, with vLLM's
// names so a vLLM command line mostly just works.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "pagoda/engine.h"
#include "pagoda/sampling_params.h"
#include "tools/pagoda/model_key_options.h"

namespace pagoda::cli {

struct EngineFlags {
  EngineArgs args;
  std::vector<std::string> served_model_names;  // the first is args.served_model_name
  std::string kv_cache_space;                   // "4GiB"; parsed in to_engine_args()
  std::string cpu_bind;                         // "": not given (then the environment, then "none")
  std::optional<int> num_reserved_cpus;         // --num-reserved-cpus / PAGODA_NUM_RESERVED_CPUS
  std::string log_level = "warning";
  CLI::Option* log_level_option = nullptr;  // to tell a given --log-level from the default
  std::string isa = "auto";                 // --isa: force a kernel table
  ModelKeyFlags model_key;                  // --model-key-file / --model-key-command

  // Validates and fills args (kv_cache_space_bytes etc.), taking what the command line left
  // unset from the environment, PAGODA_* before vLLM's VLLM_*: PAGODA_KV_CACHE_SPACE or
  // VLLM_CPU_KVCACHE_SPACE (GiB), PAGODA_CPU_BIND or VLLM_CPU_OMP_THREADS_BIND,
  // PAGODA_NUM_RESERVED_CPUS or VLLM_CPU_NUM_OF_RESERVED_CPU, PAGODA_ALLOW_LONG_MAX_MODEL_LEN or
  // VLLM_ALLOW_LONG_MAX_MODEL_LEN. Throws pagoda::Error.
  EngineArgs to_engine_args() const;
};
void add_engine_options(CLI::App* app, EngineFlags& flags);

// Sampling flags are optional so that unset ones keep the model's generation_config.json.
struct SamplingFlags {
  std::optional<int> n, max_tokens, min_tokens, top_k, logprobs;
  std::optional<float> temperature, top_p, min_p, presence_penalty, frequency_penalty,
      repetition_penalty;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool keep_special_tokens = false;

  // `defaults` (the model's generation config) overlaid with the flags that were given.
  SamplingParams apply(SamplingParams defaults) const;
};
void add_sampling_options(CLI::App* app, SamplingFlags& flags);

// The variable's value, or "" when it is unset.
std::string environment(const char* name);

// Sets up spdlog and OpenMP threads from the flags; call first in every engine command. The log
// level is --log-level, else PAGODA_LOG_LEVEL, else VLLM_LOGGING_LEVEL, else the default.
void init_runtime(const EngineFlags& flags);

}  // namespace pagoda::cli
