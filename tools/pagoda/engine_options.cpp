#include "tools/pagoda/engine_options.h"

#include <omp.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>

#include <fmt/ranges.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "demo/model_generator.h"
#include "kernels/kernels.h"
#include "kernels/thread_placement.h"
#include "model/kv_cache.h"
#include "util/error.h"
#include "util/units.h"

namespace pagoda::cli {

void add_engine_options(CLI::App* app, EngineFlags& f) {
  EngineArgs& a = f.args;
  app->add_option("--model", a.model,
                  "Hugging Face model directory, a GGUF file, a Hub repo id (org/name, or "
                  "org/name:Q4_K_M for one GGUF file), or 'demo' for a built-in random model");
  app->add_option("--tokenizer", a.tokenizer,
                  "Tokenizer directory or Hub repo id (default: the model's)");
  app->add_option("--revision", a.revision,
                  "Branch, tag or commit of a Hub model (default: the default branch)");
  app->add_option("--tokenizer-revision", a.tokenizer_revision,
                  "Branch, tag or commit of a Hub tokenizer given by --tokenizer");
  app->add_option("--download-dir", a.download_dir,
                  "Cache to download Hub models into (default: HF_HUB_CACHE, else $HF_HOME/hub)");
  app->add_option("--gguf-file", a.gguf_file,
                  "The GGUF file of a Hub repo to run (instead of its safetensors)");
  app->add_option("--served-model-name", f.served_model_names,
                  "Model name(s) clients may use; the first is the one reported");
  app->add_option("--chat-template", a.chat_template,
                  "Jinja file overriding tokenizer_config.json's template, or (as vLLM) the "
                  "template text itself");
  // Counts take vLLM's suffixes: 2k = 2000, 2K = 2048.
  const CLI::Validator count(
      [](std::string& text) {
        try {
          text = std::to_string(parse_count(text));
          return std::string();
        } catch (const Error& e) {
          return std::string(e.what());
        }
      },
      "COUNT");
  app->add_option("--max-model-len", a.max_model_len,
                  "Context length, e.g. 4096, 4k or 4K (default: the model's)")
      ->transform(count);
  app->add_option("--max-num-seqs", a.max_num_seqs, "Most requests running at once")
      ->capture_default_str();
  app->add_option("--max-num-batched-tokens", a.max_num_batched_tokens, "Token budget of one step")
      ->transform(count)
      ->capture_default_str();
  app->add_option("--block-size", a.block_size, "Tokens per KV cache block")->capture_default_str();
  app->add_option(
         "--kv-cache-space", f.kv_cache_space,
         "KV cache pool size, e.g. 4GiB (default: a quarter of available memory, at most what "
         "max-num-seqs full-length requests need; env PAGODA_KV_CACHE_SPACE, or "
         "VLLM_CPU_KVCACHE_SPACE in GiB)")
      ->envname("PAGODA_KV_CACHE_SPACE");
  app->add_option("--kv-cache-dtype", a.kv_cache_dtype,
                  "KV cache element type: auto (fp16), fp32, fp16 or bf16 (the 16-bit types: half "
                  "the memory and attention traffic of fp32)")
      ->check(CLI::IsMember(kv_cache_dtype_names()))
      ->capture_default_str();
  app->add_option("--speculative-config", a.speculative_config,
                  "Speculative decoding as vLLM's JSON, e.g. '{\"method\": \"ngram\", "
                  "\"num_speculative_tokens\": 4, \"prompt_lookup_max\": 4}', or "
                  "'{\"method\": \"mtp\"}' for DeepSeek-V3/R1, or '{\"model\": DRAFT_DIR, "
                  "\"num_speculative_tokens\": 4}' for a draft model with the same tokenizer "
                  "(docs/speculative_decoding.md)");
  // Two flags each rather than CLI11's "!--no-x" form, whose help shows a misleading {false}.
  app->add_flag("--enable-prefix-caching", a.enable_prefix_caching,
                "Reuse KV blocks of identical prompt prefixes (default on)");
  app->add_flag_callback(
      "--no-enable-prefix-caching", [&a] { a.enable_prefix_caching = false; },
      "Turn prefix caching off");
  app->add_flag("--enable-chunked-prefill", a.enable_chunked_prefill,
                "Split long prompts across steps (default on)");
  app->add_flag_callback(
      "--no-enable-chunked-prefill", [&a] { a.enable_chunked_prefill = false; },
      "Turn chunked prefill off");
  app->add_option("--long-prefill-token-threshold", a.long_prefill_token_threshold,
                  "Most tokens of one prefill chunk per step, and where a prompt counts as long "
                  "(0: no cap; with --max-num-partial-prefills > 1, 4% of max-model-len)")
      ->transform(count)
      ->capture_default_str();
  app->add_option("--max-num-partial-prefills", a.max_num_partial_prefills,
                  "Most requests prefilling in one step, each with its share of the budget "
                  "(1: no limit beyond the budget)")
      ->capture_default_str();
  app->add_option("--max-long-partial-prefills", a.max_long_partial_prefills,
                  "Of those, most with prompts over --long-prefill-token-threshold; shorter "
                  "prompts behind them are admitted first")
      ->capture_default_str();
  app->add_option("--threads", a.num_threads,
                  "Worker threads (default: one per --cpu-bind CPU, or all cores)");
  app->add_option("--cpu-bind", f.cpu_bind,
                  "Pin worker threads: none (default), cores (one per physical core) or a CPU list "
                  "like 0-3,8 (env PAGODA_CPU_BIND, or VLLM_CPU_OMP_THREADS_BIND: auto, nobind "
                  "or a list)")
      ->envname("PAGODA_CPU_BIND");
  app->add_option("--num-reserved-cpus", f.num_reserved_cpus,
                  "With --cpu-bind cores: leave the last N cores to the HTTP and tokenizer "
                  "threads (env PAGODA_NUM_RESERVED_CPUS, or VLLM_CPU_NUM_OF_RESERVED_CPU)")
      ->envname("PAGODA_NUM_RESERVED_CPUS");
  app->add_option("--weights-memory", a.weights_memory,
                  "Weight files memory-mapped (mmap) or copied into huge pages (huge-pages); "
                  "auto: huge pages unless the weights are quantized, converted or repacked "
                  "at load")
      ->check(CLI::IsMember({"auto", "mmap", "huge-pages"}))
      ->capture_default_str();
  add_model_key_options(app, f.model_key);
  app->add_option("--quantization,-q", a.quantization,
                  "Quantize float weights at load: int8 (per output channel) or int4 (groups)")
      ->check(CLI::IsMember({"int8", "int4"}));
  app->add_option("--fp8-weights", a.fp8_weights,
                  "FP8 checkpoints (DeepSeek-V3/R1): convert e4m3 weights at load to int8, "
                  "int4, or exact fp32 (dequant)")
      ->check(CLI::IsMember({"dequant", "int8", "int4"}))
      ->capture_default_str();
  app->add_option(
      "--quantization-group-size", a.quantization_group_size,
      "Values per scale: a multiple of 32 (default: per channel for int8, 32 for int4)");
  app->add_flag_callback(
      "--weight-only-quantization", [&a] { a.int8_activations = false; },
      "Keep activations in fp32 with quantized weights (default: int8 activations on "
      "integer dot products)");
  app->add_option("--engine-seed", a.seed, "Seed for requests that set none")
      ->capture_default_str();
  f.log_level_option =
      app->add_option("--log-level", f.log_level,
                      "debug, info, warning or error (env PAGODA_LOG_LEVEL, or VLLM_LOGGING_LEVEL)")
          ->envname("PAGODA_LOG_LEVEL")
          ->capture_default_str();
  std::vector<std::string> isas = kernel_isa_names();
  isas.insert(isas.begin(), "auto");
  std::string isa_list;
  for (const auto& name : isas) isa_list += (isa_list.empty() ? "" : ", ") + name;
  app->add_option("--isa", f.isa,
                  "Kernels to use: auto (the best this CPU has) or one of this build's (" +
                      isa_list + "); for debugging, comparison and bug reports (env PAGODA_ISA)")
      ->check(CLI::IsMember(isas))
      ->envname("PAGODA_ISA")
      ->capture_default_str();
}

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

namespace {

// vLLM's booleans in the environment: "1" or "true", any case; "0", "false" or unset are false.
bool environment_flag(const char* name) {
  std::string value = environment(name);
  std::transform(value.begin(), value.end(), value.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (value.empty() || value == "0" || value == "false") return false;
  if (value == "1" || value == "true") return true;
  fail("{}='{}': expected 1, true, 0 or false", name, environment(name));
}

// --cpu-bind cores less the last `reserved` cores, as a CPU list (vLLM's auto binding leaves
// VLLM_CPU_NUM_OF_RESERVED_CPU CPUs to the serving process's other threads).
std::string cores_less_reserved(int reserved) {
  std::vector<int> cpus = parse_cpu_bind("cores");
  if (reserved >= static_cast<int>(cpus.size())) {
    fail("cannot reserve {} of the {} cores this process may run on", reserved, cpus.size());
  }
  cpus.resize(cpus.size() - static_cast<size_t>(reserved));
  return fmt::format("{}", fmt::join(cpus, ","));
}

// VLLM_CPU_OMP_THREADS_BIND in --cpu-bind's terms: auto binds one thread per core, nobind
// nothing; a list is a list. vLLM separates one list per tensor-parallel rank with '|'.
std::string cpu_bind_from_vllm(const std::string& value) {
  if (value == "auto") return "cores";
  if (value == "nobind") return "none";
  if (value.find('|') != std::string::npos) {
    fail(
        "VLLM_CPU_OMP_THREADS_BIND='{}' gives one CPU list per tensor-parallel rank; Pagoda "
        "takes one list for every rank (per-rank lists are not implemented), so give one list",
        value);
  }
  return value;
}

}  // namespace

EngineArgs EngineFlags::to_engine_args() const {
  EngineArgs a = args;
  if (a.model.empty()) fail("no model given: pass --model DIR (or `pagoda serve DIR`)");
  if (!served_model_names.empty()) a.served_model_name = served_model_names.front();
  // "demo" names the built-in random model unless a directory of that name exists. The generator
  // is test scaffolding the engine library does not carry, so the name is resolved here; the
  // model keeps answering to "demo".
  if (a.model == "demo" && !std::filesystem::exists(a.model)) {
    a.model = ensure_demo_model();
    if (a.served_model_name.empty()) a.served_model_name = "demo";
  }
  const crypto::ModelKeySource key = model_key_source(model_key);
  a.model_key_file = key.file;
  a.model_key_command = key.command;
  a.model_key_environment_variable = key.environment_variable;
  if (!kv_cache_space.empty()) {
    a.kv_cache_space_bytes = parse_byte_size(kv_cache_space);
  } else if (const std::string gib = environment("VLLM_CPU_KVCACHE_SPACE"); !gib.empty()) {
    // vLLM's variable: GiB as a number; 0 lets the engine choose.
    const uint64_t bytes = parse_byte_size(gib + "GiB");
    if (bytes > 0) a.kv_cache_space_bytes = bytes;
  }
  a.cpu_bind = cpu_bind;
  if (a.cpu_bind.empty()) a.cpu_bind = cpu_bind_from_vllm(environment("VLLM_CPU_OMP_THREADS_BIND"));
  if (a.cpu_bind.empty()) a.cpu_bind = "none";
  std::optional<int> reserved = num_reserved_cpus;
  const char* reserved_from = "--num-reserved-cpus";
  if (!reserved) {
    if (const std::string n = environment("VLLM_CPU_NUM_OF_RESERVED_CPU"); !n.empty()) {
      reserved = static_cast<int>(parse_count(n));
      reserved_from = "VLLM_CPU_NUM_OF_RESERVED_CPU";
    }
  }
  if (reserved && *reserved < 0) fail("{} must not be negative, got {}", reserved_from, *reserved);
  if (reserved && *reserved > 0) {
    if (a.cpu_bind != "cores") {
      fail(
          "{} {} reserves cores of --cpu-bind cores (VLLM_CPU_OMP_THREADS_BIND=auto), but the "
          "binding is '{}': {}",
          reserved_from, *reserved, a.cpu_bind,
          a.cpu_bind == "none" ? "threads are not pinned unless --cpu-bind cores is given"
                               : "the list chooses the CPUs already");
    }
    a.cpu_bind = cores_less_reserved(*reserved);
  }
  a.allow_long_max_model_len = environment("PAGODA_ALLOW_LONG_MAX_MODEL_LEN").empty()
                                   ? environment_flag("VLLM_ALLOW_LONG_MAX_MODEL_LEN")
                                   : environment_flag("PAGODA_ALLOW_LONG_MAX_MODEL_LEN");
  if (a.block_size <= 0 || a.block_size > 1024)
    fail("--block-size must be in [1, 1024], got {}", a.block_size);
  if (a.max_num_seqs <= 0) fail("--max-num-seqs must be positive, got {}", a.max_num_seqs);
  if (a.max_num_batched_tokens <= 0) {
    fail("--max-num-batched-tokens must be positive, got {}", a.max_num_batched_tokens);
  }
  if (a.long_prefill_token_threshold < 0) {
    fail("--long-prefill-token-threshold must not be negative, got {}",
         a.long_prefill_token_threshold);
  }
  if (a.max_num_partial_prefills < 1) {
    fail("--max-num-partial-prefills must be at least 1, got {}", a.max_num_partial_prefills);
  }
  if (a.max_long_partial_prefills < 1 || a.max_long_partial_prefills > a.max_num_partial_prefills) {
    fail("--max-long-partial-prefills must be in [1, --max-num-partial-prefills], got {}",
         a.max_long_partial_prefills);
  }
  if (a.max_model_len < 0) fail("--max-model-len must not be negative, got {}", a.max_model_len);
  if (a.num_threads < 0) fail("--threads must not be negative, got {}", a.num_threads);
  return a;
}

void add_sampling_options(CLI::App* app, SamplingFlags& s) {
  app->add_option("--n", s.n, "Samples per prompt");
  app->add_option("--max-tokens", s.max_tokens, "Most tokens to generate");
  app->add_option("--min-tokens", s.min_tokens, "Tokens to generate before EOS may stop");
  app->add_option("--temperature", s.temperature, "0 for greedy");
  app->add_option("--top-p", s.top_p, "Nucleus sampling mass");
  app->add_option("--top-k", s.top_k, "Keep the k most likely tokens (0 or -1: off)");
  app->add_option("--min-p", s.min_p, "Drop tokens below min_p x the best probability");
  app->add_option("--presence-penalty", s.presence_penalty, "OpenAI presence penalty");
  app->add_option("--frequency-penalty", s.frequency_penalty, "OpenAI frequency penalty");
  app->add_option("--repetition-penalty", s.repetition_penalty, "HF repetition penalty");
  app->add_option("--seed", s.seed, "Sampling seed: same seed, same output");
  app->add_option("--stop", s.stop, "Stop string (repeatable); not included in the output");
  app->add_option("--stop-token-ids", s.stop_token_ids, "Token ids that stop generation");
  app->add_flag("--ignore-eos", s.ignore_eos, "Keep generating past EOS");
  app->add_flag("--keep-special-tokens", s.keep_special_tokens, "Print special tokens in the text");
  app->add_option("--logprobs", s.logprobs, "Report the top-K logprobs of each generated token");
}

SamplingParams SamplingFlags::apply(SamplingParams p) const {
  if (n) p.n = *n;
  if (max_tokens) p.max_tokens = *max_tokens;
  if (min_tokens) p.min_tokens = *min_tokens;
  if (temperature) p.temperature = *temperature;
  if (top_p) p.top_p = *top_p;
  if (top_k) p.top_k = *top_k;
  if (min_p) p.min_p = *min_p;
  if (presence_penalty) p.presence_penalty = *presence_penalty;
  if (frequency_penalty) p.frequency_penalty = *frequency_penalty;
  if (repetition_penalty) p.repetition_penalty = *repetition_penalty;
  if (seed) p.seed = *seed;
  if (!stop.empty()) p.stop = stop;
  if (!stop_token_ids.empty()) p.stop_token_ids = stop_token_ids;
  if (ignore_eos) p.ignore_eos = true;
  if (keep_special_tokens) p.skip_special_tokens = false;
  if (logprobs) p.logprobs = *logprobs;
  return p;
}

void init_runtime(const EngineFlags& flags) {
  std::string level_name = flags.log_level;
  const char* level_from = "--log-level";
  const std::string vllm_level = environment("VLLM_LOGGING_LEVEL");
  if (flags.log_level_option != nullptr && flags.log_level_option->count() == 0 &&
      !vllm_level.empty()) {
    // vLLM's names are Python's: DEBUG, INFO, WARNING, ERROR, CRITICAL.
    level_name = vllm_level;
    std::transform(level_name.begin(), level_name.end(), level_name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    level_from = "VLLM_LOGGING_LEVEL";
  }
  const spdlog::level::level_enum level = spdlog::level::from_str(level_name);
  if (level == spdlog::level::off && level_name != "off") {
    fail("{} must be debug, info, warning or error, got '{}'", level_from, level_name);
  }
  // Logs go to stderr: stdout carries only results (generated text, JSON).
  if (spdlog::get("pagoda") == nullptr)
    spdlog::set_default_logger(spdlog::stderr_color_mt("pagoda"));
  spdlog::set_level(level);
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ %v");
  if (flags.args.num_threads > 0) omp_set_num_threads(flags.args.num_threads);
  if (flags.isa != "auto") set_kernel_isa(flags.isa);  // fails if the CPU lacks it
  spdlog::info("kernels: {}{}", kernels().isa, flags.isa == "auto" ? "" : " (--isa)");
}

}  // namespace pagoda::cli
