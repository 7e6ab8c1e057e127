// pagoda::Engine: loads the model and composes the request path, as vLLM v1's LLMEngine does:
// InputProcessor (validate, tokenize, split samples) -> EngineCore (schedule, execute on the
// executor's model runner, update) -> OutputProcessor (detokenize, stop strings, outputs).
// Single-threaded: one thread drives add_request / step.
#include "pagoda/engine.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "crypto/model_key.h"
#include "engine/engine_core.h"
#include "engine/engine_log.h"
#include "engine/in_process_executor.h"
#include "engine/input_processor.h"
#include "engine/kv_cache_sizing.h"
#include "engine/mtp_proposer.h"
#include "engine/output_processor.h"
#include "engine/parallel_groups.h"
#include "engine/speculative_config.h"
#include "engine/tensor_parallel_executor.h"
#include "engine/weights_memory.h"
#include "hub/resolve_model.h"
#include "kernels/host_context.h"
#include "kernels/thread_placement.h"
#include "loader/safetensors.h"
#include "loader/weight_format.h"
#include "model/generation_config.h"
#include "model/gguf_model.h"
#include "model/model_config.h"
#include "model/model_registry.h"
#include "model/model_source.h"
#include "parallel/counting_communicator.h"
#include "template/chat_template.h"
#include "template/chat_template_options.h"
#include "tokenizer/tokenizer.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/numa.h"
#include "util/progress.h"
#include "util/units.h"

namespace pagoda {
class Engine::Impl {
 public:
  explicit Impl(const EngineArgs& args);
  Impl(const EngineArgs& args, ModelSource source);

  void add(const std::string& request_id, std::vector<int32_t> prompt_ids,
           const SamplingParams& params);
  void abort(const std::string& request_id);
  std::vector<RequestOutput> step();
  // An aborted request is done at once (its "abort" output comes with the next step, if any).
  bool has_unfinished_requests() const { return core_->has_unfinished_requests(); }

  EngineArgs args_;
  std::string model_dir_;
  ModelConfig config_;
  GenerationConfig generation_config_;
  TensorStore store_;
  Tokenizer tokenizer_;
  // Tensor / pipeline parallel: the groups (declared before the model and the core, which use
  // them, so that they go last); nullptr in one process.
  std::unique_ptr<ParallelGroups> groups_;
  TensorParallelExecutor* tensor_parallel_executor_ = nullptr;  // owned by core_
  std::unique_ptr<Model> model_;
  // Speculative method draft_model: the draft's files and model (nullptr otherwise).
  std::unique_ptr<ModelSource> draft_source_;
  std::unique_ptr<Model> draft_model_;
  int32_t max_model_len_ = 0;
  KvCacheSpec kv_spec_;
  KvCachePlan kv_ceiling_;  // the pool serve reserves; the most a pool sized by need takes
  std::unique_ptr<InputProcessor> inputs_;
  std::unique_ptr<EngineCore> core_;
  std::unique_ptr<OutputProcessor> outputs_;
  int64_t prompt_tokens_total_ = 0;

 private:
  void log_startup_summary() const;
  // Loads the draft model and checks that it shares the target's vocabulary.
  void load_draft_model(const SpeculativeConfig& speculative, ModelOptions options);
};

// `org/name` names a Hub repository, fetched into the cache unless there (docs/models.md). The
// built-in `demo` model is the CLI's, which passes its directory instead of the name.
std::string resolve_model_dir(const EngineArgs& args) {
  hub::HubOptions options;
  options.revision = args.revision;
  options.download_dir = args.download_dir;
  options.gguf_file = args.gguf_file;
  return hub::resolve_model(args.model, options);
}

namespace {

// Opens the model; copying weight files into memory (seconds per GB) shows progress.
ModelSource open_model_with_progress(const EngineArgs& args) {
  // Fail before minutes of loading.
  if (parse_speculative_config(args.speculative_config).enabled() &&
      parallel_world_size(args) > 1) {
    // Followers learn one sampled token per request and step; accepted drafts bring several.
    fail(
        "--speculative-config cannot be combined with --tensor-parallel-size or "
        "--pipeline-parallel-size > 1 yet");
  }
  const std::string path = resolve_model_dir(args);
  hub::HubOptions tokenizer_options;
  tokenizer_options.revision = args.tokenizer_revision;
  tokenizer_options.download_dir = args.download_dir;
  tokenizer_options.purpose = hub::Purpose::kTokenizer;
  const std::string tokenizer = hub::resolve_model(args.tokenizer, tokenizer_options);
  Progress progress("reading weights", 0);
  const Fp8Weights fp8 = parse_fp8_weights(args.fp8_weights);
  const crypto::ModelKeySource key_source{
      .file = args.model_key_file,
      .command = args.model_key_command,
      .environment_variable = args.model_key_environment_variable};
  // The table the model will be loaded with (host_execution_context's).
  const FileMemory memory = weights_memory_for(args, path, kernels());
  spdlog::info("weights memory: {}{}", file_memory_name(memory),
               args.weights_memory == "auto" ? " (--weights-memory auto)" : "");
  if (key_source.empty())
    return open_model_source(path, tokenizer, memory, &progress, nullptr, fp8);
  const crypto::ModelKey key = crypto::load_model_key(key_source);
  return open_model_source(path, tokenizer, memory, &progress, &key, fp8);
}

}  // namespace

Engine::Impl::Impl(const EngineArgs& args) : Impl(args, open_model_with_progress(args)) {}

namespace {

// --threads / --cpu-bind.
ThreadPlacement thread_placement_for(const EngineArgs& args) {
  ThreadPlacement placement;
  placement.num_threads = args.num_threads;
  placement.cpus = parse_cpu_bind(args.cpu_bind);
  // One thread per CPU bound to unless told otherwise: OpenMP's default (every CPU of the
  // process) would wrap threads onto a short list, several per CPU.
  if (placement.num_threads == 0 && !placement.cpus.empty()) {
    placement.num_threads = static_cast<int>(placement.cpus.size());
  }
  // Tensor-parallel ranks share the machine: each takes its share of the CPUs this process may
  // use (a node's, when ranks are bound one per NUMA node). OpenMP's default, every CPU per rank,
  // puts several spinning threads on each CPU: measured on 2 cores at -tp 2, a decode step spent
  // 130-150 ms in collectives instead of 2.5 ms.
  const int num_ranks = parallel_world_size(args);
  if (placement.num_threads == 0 && num_ranks > 1) {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    const int num_cpus = sched_getaffinity(0, sizeof(allowed), &allowed) == 0
                             ? CPU_COUNT(&allowed)
                             : static_cast<int>(std::thread::hardware_concurrency());
    const int sharing = std::max(num_ranks, numa_node_count());
    placement.num_threads = std::max(1, num_cpus / sharing);
    spdlog::info(
        "tensor parallel: {} kernel threads per rank ({} CPUs, {} ranks, --threads sets it)",
        placement.num_threads, num_cpus, num_ranks);
  }
  if (!placement.cpus.empty() && placement.num_threads > static_cast<int>(placement.cpus.size())) {
    spdlog::warn("{} threads on {} bound CPUs: threads will share CPUs", placement.num_threads,
                 placement.cpus.size());
  }
  return placement;
}

ModelOptions model_options_for(const EngineArgs& args, const ParallelGroups* groups) {
  ModelOptions options;
  options.max_num_batched_tokens = args.max_num_batched_tokens;
  options.weights.quantize_to = parse_quantization(args.quantization);
  options.weights.group_size = args.quantization_group_size;
  options.weights.int8_activations = args.int8_activations;
  options.weights.release_converted = true;  // the model is the one reader of its store
  if (groups != nullptr) {
    options.tensor_parallel = groups->tensor_parallel();
    options.pipeline_parallel = groups->pipeline_parallel();
  }
  options.load_mtp_layers = parse_speculative_config(args.speculative_config).method == "mtp";
  return options;
}

// The model's EOS ids, its generation config's and the tokenizer's, sorted and unique.
std::vector<int32_t> collect_eos_token_ids(const ModelConfig& config,
                                           const GenerationConfig& generation,
                                           const Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  for (int64_t id : config.eos_token_ids) ids.push_back(static_cast<int32_t>(id));
  for (int64_t id : generation.eos_token_ids) ids.push_back(static_cast<int32_t>(id));
  if (tokenizer.eos_id()) ids.push_back(*tokenizer.eos_id());
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace

Engine::Impl::Impl(const EngineArgs& args, ModelSource source)
    : args_(args),
      model_dir_(source.path),
      config_(std::move(source.config)),
      generation_config_(
          GenerationConfig::select(args.generation_config, std::move(source.generation))),
      store_(std::move(source.tensors)),
      tokenizer_(std::move(source.tokenizer)) {
  const ThreadPlacement placement = thread_placement_for(args);
  apply_thread_placement(placement);  // loading quantizes in parallel too
  groups_ = join_parallel_groups(args);
  ModelOptions options = model_options_for(args, groups_.get());
  {
    // Quantizing at load reads and converts every float matrix: the slow part of such a load.
    Progress quantizing("quantizing weights", is_quantized(options.weights.quantize_to)
                                                  ? static_cast<uint64_t>(store_.total_bytes())
                                                  : 0);
    options.weights.progress = &quantizing;
    model_ = create_model(host_execution_context(), config_, store_, options);
  }

  const ChatTemplateText chat_template =
      args.chat_template.empty()
          ? ChatTemplateText{source.chat_template, source.chat_template_origin}
          : read_chat_template_argument(args.chat_template);
  const ContentFormat content_format =
      resolve_content_format(args.chat_template_content_format, chat_template.source);
  if (args.chat_template_content_format == "auto") {
    spdlog::info("chat template content format: {} (detected from the template)",
                 content_format_name(content_format));
  }

  max_model_len_ = args.max_model_len > 0 ? args.max_model_len
                                          : static_cast<int32_t>(config_.max_position_embeddings);
  if (max_model_len_ > config_.max_position_embeddings) {
    if (!args.allow_long_max_model_len) {
      fail(
          "--max-model-len {} exceeds the model's max_position_embeddings {} ({}); set "
          "PAGODA_ALLOW_LONG_MAX_MODEL_LEN=1 (or VLLM_ALLOW_LONG_MAX_MODEL_LEN=1) to allow it",
          max_model_len_, config_.max_position_embeddings, config_.config_path);
    }
    spdlog::warn(
        "--max-model-len {} exceeds the model's max_position_embeddings {}: allowed by "
        "ALLOW_LONG_MAX_MODEL_LEN; output past the trained length may be wrong",
        max_model_len_, config_.max_position_embeddings);
  }

  InputProcessorConfig ic;
  ic.model_dir = model_dir_;
  ic.max_model_len = max_model_len_;
  ic.vocab_size = static_cast<int32_t>(model_->vocab_size());
  ic.max_logprobs = args.max_logprobs;
  ic.seed = args.seed;
  ic.eos_token_ids = collect_eos_token_ids(config_, generation_config_, tokenizer_);
  if (args.reasoning_parser == "deepseek_r1") {
    // One added token each in R1's and R1-Distill's tokenizers; a sequence elsewhere.
    ic.reasoning_start_token_ids = tokenizer_.encode("<think>", false);
    ic.reasoning_end_token_ids = tokenizer_.encode("</think>", false);
  } else if (!args.reasoning_parser.empty()) {
    fail("--reasoning-parser must be deepseek_r1, got '{}'", args.reasoning_parser);
  }
  inputs_ = std::make_unique<InputProcessor>(
      tokenizer_, std::move(ic),
      chat_template.source.empty()
          ? nullptr
          : std::make_unique<ChatTemplate>(chat_template.source, chat_template.origin),
      content_format);
  outputs_ = std::make_unique<OutputProcessor>(tokenizer_);

  const SpeculativeConfig speculative = parse_speculative_config(args.speculative_config);
  if (speculative.method == "mtp") check_mtp_model(*model_);
  if (speculative.method == "draft_model") {
    options.weights.progress = nullptr;
    load_draft_model(speculative, options);
  }
  KvCacheSpec local_spec = model_->kv_cache_spec();  // this stage's layers
  local_spec.dtype = parse_kv_cache_dtype(args.kv_cache_dtype);
  kv_spec_ = local_spec;
  // Every stage takes as many blocks as rank 0 decides: size them for the stage with the most
  // layers, so that the memory asked for is what the fullest rank holds.
  if (args.pipeline_parallel_size > 1) {
    int32_t most = 0;
    for (int stage = 0; stage < args.pipeline_parallel_size; ++stage) {
      most = std::max(most,
                      static_cast<int32_t>(pipeline_stage_layers(config_.num_hidden_layers,
                                                                 args.pipeline_parallel_size, stage)
                                               .size()));
    }
    kv_spec_.num_layers = most;
  }
  // A draft model's cache has a block for each of the target's: both come out of the budget.
  int64_t draft_kv_bytes_per_token = 0;
  if (draft_model_) {
    KvCacheSpec draft_spec = draft_model_->kv_cache_spec();
    draft_spec.dtype = kv_spec_.dtype;
    draft_kv_bytes_per_token = draft_spec.bytes_per_token();
  }
  kv_ceiling_ = plan_kv_cache(kv_spec_, args.block_size, max_model_len_, args.max_num_seqs,
                              args.kv_cache_space_bytes, draft_kv_bytes_per_token);
  EngineCoreConfig cc;
  cc.scheduler.max_num_seqs = args.max_num_seqs;
  cc.scheduler.max_num_batched_tokens = args.max_num_batched_tokens;
  cc.scheduler.max_model_len = max_model_len_;
  cc.scheduler.enable_chunked_prefill = args.enable_chunked_prefill;
  cc.scheduler.long_prefill_token_threshold = args.long_prefill_token_threshold;
  cc.scheduler.max_num_partial_prefills = args.max_num_partial_prefills;
  cc.scheduler.max_long_partial_prefills = args.max_long_partial_prefills;
  cc.scheduler.block_size = args.block_size;
  cc.scheduler.num_kv_blocks = kv_ceiling_.num_blocks;
  cc.scheduler.enable_prefix_caching = args.enable_prefix_caching;
  cc.kv_cache_by_need = args.kv_cache_by_need;
  if (draft_model_) {
    // The draft writes the KV of its drafts past the scheduled tokens (draft_model_proposer.h).
    cc.scheduler.num_lookahead_tokens = speculative.num_speculative_tokens;
  }
  auto local =
      std::make_unique<InProcessExecutor>(*model_, local_spec, args.block_size, placement,
                                          speculative, /*samples=*/true, draft_model_.get());
  if (groups_) {
    auto executor = std::make_unique<TensorParallelExecutor>(std::move(local), *groups_);
    tensor_parallel_executor_ = executor.get();
    core_ = std::make_unique<EngineCore>(cc, std::move(executor));
  } else {
    core_ = std::make_unique<EngineCore>(cc, std::move(local));
  }
  if (!placement.cpus.empty())
    spdlog::info("{} kernel threads pinned to CPUs {}", placement.num_threads,
                 fmt::join(placement.cpus, ","));
  log_startup_summary();
}

void Engine::Impl::load_draft_model(const SpeculativeConfig& speculative, ModelOptions options) {
  EngineArgs draft_args = args_;
  draft_args.model = speculative.model;
  const std::string path = resolve_model_dir(draft_args);
  Progress progress("reading draft weights", 0);
  draft_source_ = std::make_unique<ModelSource>(
      open_model_source(path, "", weights_memory_for(draft_args, path, kernels()), &progress,
                        nullptr, parse_fp8_weights(args_.fp8_weights)));
  const ModelSource& draft = *draft_source_;
  // Drafts are token ids: they mean the same only in the same vocabulary.
  if (draft.config.vocab_size != config_.vocab_size) {
    fail(
        "--speculative-config: draft model {}: vocab_size {} in {} differs from the target's {} "
        "in {}; a draft model needs the target's tokenizer",
        path, draft.config.vocab_size, draft.config.config_path, config_.vocab_size,
        config_.config_path);
  }
  const Tokenizer& draft_tokenizer = draft.tokenizer;
  const auto tokenizer_file = (std::filesystem::path(path) / "tokenizer.json").string();
  if (draft_tokenizer.vocab_size() != tokenizer_.vocab_size()) {
    fail(
        "--speculative-config: draft model {}: its tokenizer ({}) has {} tokens, the target's "
        "{}; a draft model needs the target's tokenizer",
        path, tokenizer_file, draft_tokenizer.vocab_size(), tokenizer_.vocab_size());
  }
  for (size_t id = 0; id < tokenizer_.vocab_size(); ++id) {
    const auto token = static_cast<TokenId>(id);
    const std::optional<std::string> mine = tokenizer_.id_to_token(token);
    const std::optional<std::string> theirs = draft_tokenizer.id_to_token(token);
    if (mine != theirs) {
      fail(
          "--speculative-config: draft model {}: token {} is \"{}\" in its tokenizer ({}) but "
          "\"{}\" in the target's; a draft model needs the target's tokenizer",
          path, id, theirs.value_or(""), tokenizer_file, mine.value_or(""));
    }
  }
  if (draft.config.max_position_embeddings < max_model_len_) {
    spdlog::warn(
        "draft model {}: max_position_embeddings {} is below --max-model-len {}; its drafts past "
        "that length may be poor (the target still verifies them)",
        path, draft.config.max_position_embeddings, max_model_len_);
  }
  draft_model_ = create_model(host_execution_context(), draft_source_->config,
                              draft_source_->tensors, options);
  spdlog::info(
      "speculative decoding: draft model {} ({} {}, {} parameters, weights {}), {} tokens "
      "per step",
      path, draft.config.architecture, draft.config.model_type, draft_model_->num_parameters(),
      format_bytes(static_cast<uint64_t>(draft_model_->weight_bytes())),
      speculative.num_speculative_tokens);
}

// What an operator checks first in a log: the settings, what was loaded, and how many requests
// fit, in the order and terms vLLM logs them.
void Engine::Impl::log_startup_summary() const {
  if (!spdlog::should_log(spdlog::level::info)) return;
  const std::string changed = non_default_engine_args(args_);
  spdlog::info("engine args (non-default): {}", changed.empty() ? "none" : changed);
  const double params = static_cast<double>(model_->num_parameters());
  const std::string params_text =
      params >= 1e9 ? fmt::format("{:.2f} B", params / 1e9) : fmt::format("{:.2f} M", params / 1e6);
  spdlog::info("model {}: architecture {}, {} parameters, weights {} ({} {}{})", model_dir_,
               config_.architecture, params_text,
               format_bytes(static_cast<uint64_t>(model_->weight_bytes())),
               is_gguf_path(model_dir_) ? "GGUF" : "safetensors", describe_weight_format(store_),
               args_.quantization.empty()
                   ? ""
                   : fmt::format(", quantized to {} at load", args_.quantization));
  if (args_.kv_cache_by_need) {
    spdlog::info("KV cache: sized by need, up to {} tokens ({}), dtype {}",
                 int64_t{kv_ceiling_.num_blocks} * args_.block_size,
                 format_bytes(static_cast<uint64_t>(kv_ceiling_.num_bytes)),
                 dtype_name(kv_spec_.dtype));
    return;
  }
  const int64_t bytes_per_token =
      kv_ceiling_.num_bytes / (int64_t{kv_ceiling_.num_blocks} * args_.block_size);
  spdlog::info(
      "KV cache: {} tokens ({} blocks of {}), {} ({} per token{}), dtype {}, {}, reserved in "
      "{:.2f} s",
      int64_t{kv_ceiling_.num_blocks} * args_.block_size, kv_ceiling_.num_blocks, args_.block_size,
      format_bytes(static_cast<uint64_t>(kv_ceiling_.num_bytes)),
      format_bytes(static_cast<uint64_t>(bytes_per_token)),
      draft_model_
          ? fmt::format(
                ", {} of them the draft model's",
                format_bytes(static_cast<uint64_t>(bytes_per_token - kv_spec_.bytes_per_token())))
          : std::string(),
      dtype_name(kv_spec_.dtype), core_->executor().kv_cache_memory_kind(),
      core_->kv_reserve_seconds());
  spdlog::info("Maximum concurrency for {} tokens per request: {:.2f}x", max_model_len_,
               max_concurrency(kv_ceiling_.num_blocks, args_.block_size, max_model_len_));
}

void Engine::Impl::add(const std::string& request_id, std::vector<int32_t> prompt_ids,
                       const SamplingParams& params) {
  if (outputs_->has_request(request_id)) fail("request id '{}' is already in use", request_id);
  const auto num_prompt = static_cast<int64_t>(prompt_ids.size());
  std::vector<Request> samples = inputs_->process(request_id, std::move(prompt_ids), params);
  outputs_->add_request(request_id, samples, params, steady_seconds());
  try {
    core_->add_requests(std::move(samples));
  } catch (...) {
    outputs_->remove_request(request_id);
    throw;
  }
  prompt_tokens_total_ += num_prompt;
}

void Engine::Impl::abort(const std::string& request_id) {
  core_->finish_requests(outputs_->abort_request(request_id), RequestStatus::kFinishedAborted);
}

std::vector<RequestOutput> Engine::Impl::step() {
  const EngineCoreOutputs core_outputs = core_->step();
  OutputProcessor::Result processed = outputs_->process_outputs(core_outputs);
  // A stop string ends the sample here; the core frees its blocks now.
  core_->finish_requests(processed.stopped_request_ids, RequestStatus::kFinishedStopped);
  return std::move(processed.outputs);
}

// ---------------------------------------------------------------------------------------------

Engine::Engine(const EngineArgs& args) : impl_(std::make_unique<Impl>(args)) {}
Engine::~Engine() = default;

void Engine::add_request(const std::string& request_id, const std::string& prompt,
                         const SamplingParams& params) {
  impl_->add(request_id, impl_->inputs_->tokenize(prompt), params);
}

void Engine::add_request_tokens(const std::string& request_id,
                                std::vector<int32_t> prompt_token_ids,
                                const SamplingParams& params) {
  impl_->add(request_id, std::move(prompt_token_ids), params);
}

void Engine::prepare_request(const SamplingParams& params) {
  impl_->inputs_->prepare(params);
}

void Engine::abort_request(const std::string& request_id) {
  impl_->abort(request_id);
}

std::vector<RequestOutput> Engine::step() {
  return impl_->step();
}

bool Engine::has_unfinished_requests() const {
  return impl_->has_unfinished_requests();
}

std::vector<RequestOutput> Engine::generate(
    const std::vector<std::string>& prompts, const std::vector<SamplingParams>& params,
    const std::function<void(const RequestOutput&)>& on_output) {
  if (params.size() != 1 && params.size() != prompts.size()) {
    fail("generate: {} prompts but {} sampling parameter sets", prompts.size(), params.size());
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    add_request(std::to_string(i), prompts[i], params.size() == 1 ? params[0] : params[i]);
  }
  std::vector<RequestOutput> finished(prompts.size());
  while (has_unfinished_requests()) {
    for (RequestOutput& out : step()) {
      if (on_output) on_output(out);
      if (out.finished) {
        const size_t index = std::stoul(out.request_id);
        finished[index] = std::move(out);
      }
    }
  }
  return finished;
}

std::vector<int32_t> Engine::encode(const std::string& text, bool add_special_tokens) const {
  return impl_->tokenizer_.encode(text, add_special_tokens);
}

std::string Engine::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  return impl_->tokenizer_.decode(ids, skip_special_tokens);
}

std::string Engine::apply_chat_template(const std::string& messages_json,
                                        bool add_generation_prompt,
                                        const std::string& kwargs_json) const {
  return impl_->inputs_->apply_chat_template(messages_json, add_generation_prompt, kwargs_json);
}

EngineStats Engine::stats() const {
  const EngineCoreStats core = impl_->core_->stats();
  EngineStats st;
  st.num_running = core.num_running;
  st.num_waiting = core.num_waiting;
  st.kv_cache_usage = core.kv_cache_usage;
  st.kv_cache_total_bytes =
      impl_->kv_spec_.bytes_per_token() * impl_->args_.block_size * core.num_kv_blocks;
  st.num_preemptions = core.num_preemptions;
  st.prefix_cache_queries = core.prefix_cache_queries;
  st.prefix_cache_hits = core.prefix_cache_hits;
  st.prompt_tokens = impl_->prompt_tokens_total_;
  st.prompt_tokens_computed = core.prompt_tokens_computed;
  st.generation_tokens = impl_->outputs_->num_generation_tokens();
  st.num_steps = core.num_steps;
  st.last_step_num_tokens = core.last_step_num_tokens;
  st.spec_num_drafts = core.spec_num_drafts;
  st.spec_num_draft_tokens = core.spec_num_draft_tokens;
  st.spec_num_accepted_tokens = core.spec_num_accepted_tokens;
  st.spec_num_accepted_tokens_per_pos = core.spec_num_accepted_tokens_per_pos;
  st.decode_experts = core.decode_experts;
  st.verify_experts = core.verify_experts;
  return st;
}

std::string Engine::communication_summary() const {
  const TensorParallelExecutor* executor = impl_->tensor_parallel_executor_;
  return executor != nullptr ? executor->stats_summary() : "";
}

void run_tensor_parallel_follower(const EngineArgs& args) {
  if (args.tensor_parallel_rank < 1 || args.tensor_parallel_rank >= parallel_world_size(args)) {
    fail("parallel: rank {} is not a follower of a group of {}", args.tensor_parallel_rank,
         parallel_world_size(args));
  }
  ModelSource source = open_model_with_progress(args);
  const ThreadPlacement placement = thread_placement_for(args);
  apply_thread_placement(placement);
  std::unique_ptr<ParallelGroups> groups = join_parallel_groups(args);
  std::unique_ptr<Model> model =
      create_model(host_execution_context(), source.config, source.tensors,
                   model_options_for(args, groups.get()));
  KvCacheSpec spec = model->kv_cache_spec();
  spec.dtype = parse_kv_cache_dtype(args.kv_cache_dtype);
  InProcessExecutor local(*model, spec, args.block_size, placement, SpeculativeConfig{},
                          /*samples=*/false);
  run_tensor_parallel_follower(local, *groups);
}

CacheInfo Engine::cache_info() const {
  CacheInfo c;
  c.block_size = impl_->args_.block_size;
  c.num_blocks = impl_->core_->num_kv_blocks();
  c.num_bytes = impl_->kv_spec_.bytes_per_token() * c.block_size * c.num_blocks;
  c.dtype = dtype_name(impl_->kv_spec_.dtype);
  c.enable_prefix_caching = impl_->args_.enable_prefix_caching;
  return c;
}

const EngineArgs& Engine::args() const {
  return impl_->args_;
}

std::string Engine::model_name() const {
  if (!impl_->args_.served_model_name.empty()) return impl_->args_.served_model_name;
  return impl_->args_.model;
}

int32_t Engine::max_model_len() const {
  return impl_->max_model_len_;
}

SamplingParams Engine::default_sampling_params() const {
  return impl_->generation_config_.default_sampling_params();
}

}  // namespace pagoda
