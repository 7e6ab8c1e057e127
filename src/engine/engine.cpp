// pagoda::Engine: the single-threaded engine core. It owns the model, the paged KV cache, the
// scheduler and one sampler/detokenizer/stop matcher per generated sequence, and turns each
// scheduler step into one forward pass plus streamed RequestOutputs.
#include "pagoda/engine.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>
#include <unordered_map>

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "crypto/model_key.h"
#include "engine/engine_log.h"
#include "engine/kv_cache_sizing.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"
#include "hub/resolve_model.h"
#include "kernels/thread_placement.h"
#include "loader/safetensors.h"
#include "loader/weight_format.h"
#include "model/generation_config.h"
#include "model/gguf_model.h"
#include "model/model_config.h"
#include "model/model_generator.h"
#include "model/model_registry.h"
#include "model/model_source.h"
#include "sampling/logits_ops.h"
#include "sampling/sampler.h"
#include "sampling/stop_strings.h"
#include "sampling/validate.h"
#include "template/chat_template.h"
#include "template/chat_template_options.h"
#include "tokenizer/incremental_decoder.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/huge_buffer.h"
#include "util/progress.h"
#include "util/units.h"

namespace pagoda {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

class Engine::Impl {
 public:
  explicit Impl(const EngineArgs& args);
  Impl(const EngineArgs& args, ModelSource source);

  void add(const std::string& request_id, std::vector<int32_t> prompt_ids,
           const SamplingParams& params);
  void abort(const std::string& request_id);
  std::vector<RequestOutput> step();

  EngineArgs args_;
  std::string model_dir_;
  ModelConfig config_;
  GenerationConfig generation_config_;
  TensorStore store_;
  Tokenizer tokenizer_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<ChatTemplate> chat_template_;
  ContentFormat content_format_ = ContentFormat::kString;  // --chat-template-content-format
  std::vector<int32_t> eos_token_ids_;
  int32_t max_model_len_ = 0;
  HugeBuffer kv_memory_;
  // --threads / --cpu-bind, applied to whichever thread drives the steps (the server's engine
  // thread is not the one that built the engine; OpenMP settings are per thread).
  ThreadPlacement placement_;
  std::thread::id placed_thread_;
  std::unique_ptr<KvCache> kv_cache_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<ModelRunner> runner_;
  KvCachePlan kv_plan_;
  uint64_t num_requests_added_ = 0;
  int64_t prompt_tokens_total_ = 0;
  int64_t generation_tokens_total_ = 0;
  int64_t prompt_tokens_computed_ = 0;
  int64_t num_steps_ = 0;
  int32_t last_step_num_tokens_ = 0;

 private:
  // One generated sequence (one of a request's n samples).
  struct Sequence {
    std::string parent_id;
    int32_t index = 0;
    std::unique_ptr<RequestSampler> sampler;
    std::unique_ptr<IncrementalDecoder> decoder;
    std::unique_ptr<StopStringMatcher> stop;
    bool wants_logprobs = false;
    int64_t step_sample = -1;  // index into step_samples_ this step, -1 if not sampled
    bool done = false;
  };
  // What the caller asked for: the prompt and its n outputs.
  struct Parent {
    RequestOutput output;
    std::vector<std::string> sequence_ids;
    int num_top_prompt_logprobs = -1;  // params.prompt_logprobs, -1 when not requested
    bool touched = false;              // has news for the caller this step
  };
  // One prompt position whose logprobs this step's logits answer.
  struct PromptRow {
    Parent* parent = nullptr;
    const float* logits = nullptr;  // [vocab]: the row of the token before `position`
    int32_t position = 0;
  };

  void place_threads();
  void log_startup_summary(double reserve_s) const;
  void append_token(Sequence& seq, CompletionOutput& out, int32_t token_id);
  void finish_sequence(Sequence& seq, CompletionOutput& out, RequestStatus status);
  GeneratedTokenLogprobs make_logprobs(const SampleResult& sample) const;
  // Prompt logprobs of the rows this step computed for requests with all_logits.
  void compute_prompt_logprobs(const SchedulerOutput& scheduled);
  std::string token_text(int32_t id) const;

  std::unordered_map<std::string, Sequence> sequences_;
  std::unordered_map<std::string, Parent> parents_;
  std::vector<SampleResult> step_samples_;
  std::vector<PromptRow> prompt_rows_;  // scratch of compute_prompt_logprobs
  std::vector<std::string> aborted_parents_;
};

namespace {

// --weights-memory, "auto" resolved: decode streams weights used as stored through the TLB on
// every step, so they go into huge pages (measured faster, docs/kernels.md); files read once to
// be quantized or repacked are mapped, since a copy would only cost memory and load time.
FileMemory weights_memory_for(const EngineArgs& args, const std::string& model_path) {
  if (args.weights_memory != "auto") return parse_file_memory(args.weights_memory);
  const bool read_once = !args.quantization.empty() || is_gguf_path(model_path);
  return read_once ? FileMemory::kMap : FileMemory::kHugePageCopy;
}

}  // namespace

// "demo" names the built-in random model unless a directory of that name exists; `org/name`
// a Hub repository, fetched into the cache unless there (docs/models.md).
std::string resolve_model_dir(const EngineArgs& args) {
  if (args.model == "demo" && !std::filesystem::exists(args.model)) return ensure_demo_model();
  return hub::resolve_model(
      args.model,
      {.revision = args.revision, .download_dir = args.download_dir, .gguf_file = args.gguf_file});
}

namespace {

// Opens the model; copying weight files into memory (seconds per GB) shows progress.
ModelSource open_model_with_progress(const EngineArgs& args) {
  const std::string path = resolve_model_dir(args);
  const std::string tokenizer =
      hub::resolve_model(args.tokenizer, {.revision = args.tokenizer_revision,
                                          .download_dir = args.download_dir,
                                          .purpose = hub::Purpose::kTokenizer});
  Progress progress("reading weights", 0);
  const crypto::ModelKeySource key_source{
      .file = args.model_key_file,
      .command = args.model_key_command,
      .environment_variable = args.model_key_environment_variable};
  if (key_source.empty()) {
    return open_model_source(path, tokenizer, weights_memory_for(args, path), &progress);
  }
  const crypto::ModelKey key = crypto::load_model_key(key_source);
  return open_model_source(path, tokenizer, weights_memory_for(args, path), &progress, &key);
}

}  // namespace

Engine::Impl::Impl(const EngineArgs& args) : Impl(args, open_model_with_progress(args)) {}

Engine::Impl::Impl(const EngineArgs& args, ModelSource source)
    : args_(args),
      model_dir_(source.path),
      config_(std::move(source.config)),
      generation_config_(
          GenerationConfig::select(args.generation_config, std::move(source.generation))),
      store_(std::move(source.tensors)),
      tokenizer_(std::move(source.tokenizer)) {
  placement_.num_threads = args.num_threads;
  placement_.cpus = parse_cpu_bind(args.cpu_bind);
  // One thread per CPU bound to unless told otherwise: OpenMP's default (every CPU of the
  // process) would wrap threads onto a short list, several per CPU.
  if (placement_.num_threads == 0 && !placement_.cpus.empty()) {
    placement_.num_threads = static_cast<int>(placement_.cpus.size());
  }
  if (!placement_.cpus.empty() &&
      placement_.num_threads > static_cast<int>(placement_.cpus.size())) {
    spdlog::warn("{} threads on {} bound CPUs: threads will share CPUs", placement_.num_threads,
                 placement_.cpus.size());
  }
  place_threads();  // loading quantizes in parallel too
  ModelOptions options;
  options.max_num_batched_tokens = args.max_num_batched_tokens;
  options.weights.quantize_to = parse_quantization(args.quantization);
  options.weights.group_size = args.quantization_group_size;
  options.weights.int8_activations = args.int8_activations;
  {
    // Quantizing at load reads and converts every float matrix: the slow part of such a load.
    Progress quantizing("quantizing weights", is_quantized(options.weights.quantize_to)
                                                  ? static_cast<uint64_t>(store_.total_bytes())
                                                  : 0);
    options.weights.progress = &quantizing;
    model_ = create_model(config_, store_, options);
  }

  const ChatTemplateText chat_template =
      args.chat_template.empty()
          ? ChatTemplateText{source.chat_template, source.chat_template_origin}
          : read_chat_template_argument(args.chat_template);
  if (!chat_template.source.empty()) {
    chat_template_ = std::make_unique<ChatTemplate>(chat_template.source, chat_template.origin);
  }
  content_format_ = resolve_content_format(args.chat_template_content_format, chat_template.source);
  if (args.chat_template_content_format == "auto") {
    spdlog::info("chat template content format: {} (detected from the template)",
                 content_format_name(content_format_));
  }

  for (int64_t id : config_.eos_token_ids) eos_token_ids_.push_back(static_cast<int32_t>(id));
  for (int64_t id : generation_config_.eos_token_ids)
    eos_token_ids_.push_back(static_cast<int32_t>(id));
  if (tokenizer_.eos_id()) eos_token_ids_.push_back(*tokenizer_.eos_id());
  std::sort(eos_token_ids_.begin(), eos_token_ids_.end());
  eos_token_ids_.erase(std::unique(eos_token_ids_.begin(), eos_token_ids_.end()),
                       eos_token_ids_.end());

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

  KvCacheSpec spec = model_->kv_cache_spec();
  spec.dtype = parse_kv_cache_dtype(args.kv_cache_dtype);
  kv_plan_ = plan_kv_cache(spec, args.block_size, max_model_len_, args.max_num_seqs,
                           args.kv_cache_space_bytes);
  const KvCachePlan& plan = kv_plan_;
  // The pool is faulted in now, as vLLM and llama.cpp reserve theirs at startup: a machine
  // short of memory fails here, not mid-request, and no request pays for zeroing fresh pages
  // (a block handed out for the first time would otherwise fault in a 2 MiB huge page under a
  // running decode step).
  HugeBufferOptions kv_options;
  kv_options.prefault = true;
  const auto reserve_start = std::chrono::steady_clock::now();
  try {
    Progress reserving("reserving KV cache", static_cast<uint64_t>(plan.num_bytes));
    kv_options.progress = &reserving;
    kv_memory_ = HugeBuffer::allocate(static_cast<size_t>(plan.num_bytes), kv_options);
  } catch (const Error& e) {
    fail("KV cache pool: {}; lower --kv-cache-space", e.what());
  }
  const double reserve_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - reserve_start).count();
  kv_cache_ = std::make_unique<KvCache>(spec, plan.num_blocks, args.block_size, kv_memory_.data());

  SchedulerConfig sc;
  sc.max_num_seqs = args.max_num_seqs;
  sc.max_num_batched_tokens = args.max_num_batched_tokens;
  sc.max_model_len = max_model_len_;
  sc.enable_chunked_prefill = args.enable_chunked_prefill;
  sc.block_size = args.block_size;
  sc.num_kv_blocks = plan.num_blocks;
  sc.enable_prefix_caching = args.enable_prefix_caching;
  scheduler_ = std::make_unique<Scheduler>(sc);
  runner_ = std::make_unique<ModelRunner>(*model_, *kv_cache_);
  if (!placement_.cpus.empty())
    spdlog::info("{} kernel threads pinned to CPUs {}", placement_.num_threads,
                 fmt::join(placement_.cpus, ","));
  log_startup_summary(reserve_s);
}

// What an operator checks first in a log: the settings, what was loaded, and how many requests
// fit, in the order and terms vLLM logs them.
void Engine::Impl::log_startup_summary(double reserve_s) const {
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
  const KvCacheSpec& spec = kv_cache_->spec();
  spdlog::info(
      "KV cache: {} tokens ({} blocks of {}), {} ({} per token), dtype {}, {}, reserved in "
      "{:.2f} s",
      int64_t{kv_plan_.num_blocks} * args_.block_size, kv_plan_.num_blocks, args_.block_size,
      format_bytes(static_cast<uint64_t>(kv_plan_.num_bytes)),
      format_bytes(static_cast<uint64_t>(spec.bytes_per_token())), dtype_name(spec.dtype),
      kv_memory_.kind_name(), reserve_s);
  spdlog::info("Maximum concurrency for {} tokens per request: {:.2f}x", max_model_len_,
               max_concurrency(kv_plan_.num_blocks, args_.block_size, max_model_len_));
}

void Engine::Impl::add(const std::string& request_id, std::vector<int32_t> prompt_ids,
                       const SamplingParams& params) {
  // --max-logprobs -1: as many as the vocabulary has.
  const int max_logprobs = args_.max_logprobs < 0 ? model_->vocab_size() : args_.max_logprobs;
  if (std::optional<std::string> problem = validate(params, max_logprobs)) fail("{}", *problem);
  if (params.prompt_logprobs &&
      (*params.prompt_logprobs < 0 || *params.prompt_logprobs > max_logprobs)) {
    fail("prompt_logprobs must be in [0, {}], got {}", max_logprobs, *params.prompt_logprobs);
  }
  if (parents_.count(request_id) != 0) fail("request id '{}' is already in use", request_id);
  if (prompt_ids.empty()) fail("the prompt is empty");
  for (int32_t id : prompt_ids) {
    if (id < 0 || id >= model_->vocab_size()) {
      fail("prompt token id {} is outside the vocabulary [0, {})", id, model_->vocab_size());
    }
  }
  const int64_t total = static_cast<int64_t>(prompt_ids.size()) + params.max_tokens;
  if (total > max_model_len_) {
    fail("the prompt ({} tokens) plus max_tokens ({}) is {} tokens over the context length of {}",
         prompt_ids.size(), params.max_tokens, total - max_model_len_, max_model_len_);
  }

  Parent parent;
  parent.output.request_id = request_id;
  parent.output.prompt_token_ids = prompt_ids;
  parent.output.metrics.arrival_time_s = now_s();
  parent.output.outputs.resize(static_cast<size_t>(params.n));
  if (params.prompt_logprobs) {
    parent.num_top_prompt_logprobs = *params.prompt_logprobs;
    parent.output.prompt_logprobs.resize(parent.output.prompt_token_ids.size());
  }
  const uint64_t base_seed = args_.seed * 0x9E3779B97F4A7C15ull + (++num_requests_added_);

  Request request(request_id, std::move(prompt_ids), params, eos_token_ids_);
  std::vector<Request> samples = split_samples(std::move(request));
  // Sample 0 computes the prompt (the others fork its blocks), so it alone produces the prompt
  // logits. A one-token prompt has none to report: its only entry is the empty first one.
  samples.front().wants_prompt_logits =
      params.prompt_logprobs.has_value() && samples.front().num_prompt_tokens() > 1;
  for (size_t i = 0; i < samples.size(); ++i) {
    Request& r = samples[i];
    Sequence seq;
    seq.parent_id = request_id;
    seq.index = static_cast<int32_t>(i);
    seq.sampler = std::make_unique<RequestSampler>(r.sampling_params, r.prompt_token_ids(),
                                                   eos_token_ids_, base_seed + i);
    seq.decoder = std::make_unique<IncrementalDecoder>(
        tokenizer_, r.sampling_params.skip_special_tokens, r.prompt_token_ids());
    seq.stop = std::make_unique<StopStringMatcher>(r.sampling_params);
    seq.wants_logprobs = r.sampling_params.logprobs.has_value();
    parent.output.outputs[i].index = static_cast<int32_t>(i);
    parent.sequence_ids.push_back(r.request_id);
    sequences_.emplace(r.request_id, std::move(seq));
  }
  // Queue only once every sample is known to be valid, so a failure leaves nothing behind.
  try {
    for (Request& r : samples) scheduler_->add_request(std::move(r));
  } catch (...) {
    for (const std::string& id : parent.sequence_ids) {
      scheduler_->abort_request(id);
      sequences_.erase(id);
    }
    throw;
  }
  prompt_tokens_total_ += static_cast<int64_t>(parent.output.prompt_token_ids.size());
  parents_.emplace(request_id, std::move(parent));
}

void Engine::Impl::abort(const std::string& request_id) {
  auto it = parents_.find(request_id);
  if (it == parents_.end()) return;
  Parent& parent = it->second;
  for (const std::string& id : parent.sequence_ids) {
    auto seq = sequences_.find(id);
    if (seq == sequences_.end() || seq->second.done) continue;
    scheduler_->abort_request(id);
    CompletionOutput& out = parent.output.outputs[static_cast<size_t>(seq->second.index)];
    out.finish_reason = "abort";
    seq->second.done = true;
  }
  parent.touched = true;
  aborted_parents_.push_back(request_id);
}

std::string Engine::Impl::token_text(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= tokenizer_.vocab_size()) return "";
  const int32_t ids[1] = {id};
  return tokenizer_.decode(ids, false);
}

GeneratedTokenLogprobs Engine::Impl::make_logprobs(const SampleResult& sample) const {
  GeneratedTokenLogprobs lp;
  lp.chosen = {sample.token_id, token_text(sample.token_id), sample.logprob};
  for (const TokenLogprob& t : sample.top_logprobs)
    lp.top.push_back({t.token_id, token_text(t.token_id), t.logprob});
  return lp;
}

void Engine::Impl::compute_prompt_logprobs(const SchedulerOutput& scheduled) {
  prompt_rows_.clear();
  const int64_t vocab = runner_->vocab_size();
  for (size_t i = 0; i < scheduled.requests.size(); ++i) {
    const ScheduledRequest& r = scheduled.requests[i];
    if (!r.all_logits) continue;
    Parent& parent = parents_.at(sequences_.at(r.request_id).parent_id);
    const auto num_prompt = static_cast<int32_t>(parent.output.prompt_token_ids.size());
    const ModelRunner::LogitsRows rows = runner_->logits_rows(i);
    // Row j follows the token at first_position + j, so it predicts the next one; the row after
    // the last prompt token predicts the first output token and is left to the sampler.
    for (int32_t j = 0; j < rows.num_rows; ++j) {
      const int32_t position = rows.first_position + j + 1;
      if (position >= num_prompt) break;
      prompt_rows_.push_back({&parent, rows.data + j * vocab, position});
    }
    if (r.start_position + r.num_new_tokens() >= num_prompt) r.request->wants_prompt_logits = false;
  }
  if (prompt_rows_.empty()) return;

  // Each row writes its own entry of a vector sized in add(), so the rows run in parallel.
  const auto num_rows = static_cast<int64_t>(prompt_rows_.size());
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t k = 0; k < num_rows; ++k) {
    const PromptRow& pr = prompt_rows_[static_cast<size_t>(k)];
    const int32_t token_id = pr.parent->output.prompt_token_ids[static_cast<size_t>(pr.position)];
    // Raw logprobs (log_softmax of the logits, no penalties or temperature), as the sampler's.
    const double log_normalizer = log_sum_exp(pr.logits, vocab);
    const float target = pr.logits[token_id];
    int32_t rank = 1;  // vLLM: 1 + the number of tokens strictly more likely
    for (int64_t v = 0; v < vocab; ++v) rank += pr.logits[v] > target ? 1 : 0;
    GeneratedTokenLogprobs lp;
    lp.chosen = {token_id, token_text(token_id),
                 static_cast<float>(static_cast<double>(target) - log_normalizer), rank};
    if (pr.parent->num_top_prompt_logprobs > 0) {
      std::vector<int32_t> top_ids;
      top_n_tokens(pr.logits, vocab, pr.parent->num_top_prompt_logprobs, top_ids);
      for (size_t t = 0; t < top_ids.size(); ++t) {
        const int32_t id = top_ids[t];
        lp.top.push_back({id, token_text(id),
                          static_cast<float>(static_cast<double>(pr.logits[id]) - log_normalizer),
                          static_cast<int32_t>(t) + 1});
      }
    }
    pr.parent->output.prompt_logprobs[static_cast<size_t>(pr.position)] = std::move(lp);
  }
}

void Engine::Impl::append_token(Sequence& seq, CompletionOutput& out, int32_t token_id) {
  seq.sampler->accept(token_id);
  out.token_ids.push_back(token_id);
  out.delta_token_ids.push_back(token_id);
  ++generation_tokens_total_;
  if (seq.stop->stopped()) return;
  const StopStringMatcher::PushResult pushed = seq.stop->push(seq.decoder->step(token_id));
  out.delta_text += pushed.text;
}

void Engine::Impl::finish_sequence(Sequence& seq, CompletionOutput& out, RequestStatus status) {
  if (seq.done) return;
  seq.done = true;
  if (seq.stop->stopped()) {
    out.finish_reason = "stop";
    out.stop_reason = seq.stop->stop_reason();
  } else {
    const StopStringMatcher::PushResult pushed = seq.stop->push(seq.decoder->finish());
    out.delta_text += pushed.text;
    if (pushed.stopped) {
      out.finish_reason = "stop";
      out.stop_reason = seq.stop->stop_reason();
    } else {
      out.delta_text += seq.stop->flush();
      out.finish_reason = std::string(finish_reason_name(status));
    }
  }
}

void Engine::Impl::place_threads() {
  if (placed_thread_ == std::this_thread::get_id()) return;
  apply_thread_placement(placement_);
  placed_thread_ = std::this_thread::get_id();
}

std::vector<RequestOutput> Engine::Impl::step() {
  place_threads();
  const double t_start = now_s();
  std::vector<RequestOutput> results;
  SchedulerOutput scheduled = scheduler_->schedule();
  const double t_scheduled = now_s();
  // Summarized before update_from_output, which may free the requests a finished step names.
  const bool log_step = spdlog::should_log(spdlog::level::debug) &&
                        (!scheduled.empty() || !scheduled.preempted_request_ids.empty());
  StepSummary step_summary;
  if (!scheduled.empty()) {
    ++num_steps_;
    last_step_num_tokens_ = scheduled.total_num_scheduled_tokens;
    for (const ScheduledRequest& r : scheduled.requests) {
      const int32_t prompt_end = r.request->num_prompt_tokens();
      if (r.start_position < prompt_end) {
        prompt_tokens_computed_ +=
            std::min(r.start_position + r.num_new_tokens(), prompt_end) - r.start_position;
      }
    }
  }
  if (log_step) step_summary = summarize_step(scheduled, num_steps_);
  if (!scheduled.empty()) {
    runner_->execute(scheduled);
    compute_prompt_logprobs(scheduled);

    // Sample every request whose last row was computed; samplers are independent.
    const int64_t num = static_cast<int64_t>(scheduled.requests.size());
    step_samples_.resize(static_cast<size_t>(num));
    ModelRunnerOutput runner_output;
    runner_output.sampled_tokens.resize(static_cast<size_t>(num));
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t i = 0; i < num; ++i) {
      const ScheduledRequest& r = scheduled.requests[static_cast<size_t>(i)];
      if (!r.sample) continue;
      Sequence& seq = sequences_.at(r.request_id);
      step_samples_[static_cast<size_t>(i)] =
          seq.sampler->sample(runner_->logits_row(static_cast<size_t>(i)), runner_->vocab_size());
      runner_output.sampled_tokens[static_cast<size_t>(i)].token_id =
          step_samples_[static_cast<size_t>(i)].token_id;
    }
    const double t_sampled = now_s();

    // Remember which of this step's samples belongs to each sequence, for logprobs.
    for (size_t i = 0; i < scheduled.requests.size(); ++i) {
      const ScheduledRequest& r = scheduled.requests[i];
      Sequence& seq = sequences_.at(r.request_id);
      seq.step_sample = r.sample ? static_cast<int64_t>(i) : -1;
      Parent& parent = parents_.at(seq.parent_id);
      if (parent.output.metrics.first_scheduled_time_s == 0)
        parent.output.metrics.first_scheduled_time_s = t_scheduled;
    }

    for (RequestUpdate& u : scheduler_->update_from_output(scheduled, runner_output)) {
      auto seq_it = sequences_.find(u.request_id);
      if (seq_it == sequences_.end()) continue;
      Sequence& seq = seq_it->second;
      Parent& parent = parents_.at(seq.parent_id);
      CompletionOutput& out = parent.output.outputs[static_cast<size_t>(seq.index)];
      parent.touched = true;
      for (int32_t token : u.new_token_ids) {
        if (seq.wants_logprobs && seq.step_sample >= 0) {
          const SampleResult& sample = step_samples_[static_cast<size_t>(seq.step_sample)];
          if (sample.token_id == token) out.logprobs.push_back(make_logprobs(sample));
        }
        append_token(seq, out, token);
      }
      RequestMetrics& m = parent.output.metrics;
      if (!u.new_token_ids.empty()) {
        if (m.first_token_time_s == 0) m.first_token_time_s = t_sampled;
        m.last_token_time_s = t_sampled;
      }
      if (u.finished) {
        if (u.finished_request)
          parent.output.num_cached_tokens = u.finished_request->num_cached_prompt_tokens;
        finish_sequence(
            seq, out,
            u.finished_request ? u.finished_request->status : RequestStatus::kFinishedStopped);
      } else if (seq.stop->stopped()) {
        std::shared_ptr<Request> done =
            scheduler_->finish_request(u.request_id, RequestStatus::kFinishedStopped);
        if (done) parent.output.num_cached_tokens = done->num_cached_prompt_tokens;
        finish_sequence(seq, out, RequestStatus::kFinishedStopped);
      } else if (const Request* live = scheduler_->find_request(u.request_id)) {
        parent.output.num_cached_tokens = live->num_cached_prompt_tokens;
      }
    }
  }

  // Report every request with news; retire the ones whose samples all finished.
  std::vector<std::string> retired;
  for (auto& [id, parent] : parents_) {
    if (!parent.touched) continue;
    parent.touched = false;
    bool all_done = true;
    for (const std::string& seq_id : parent.sequence_ids) all_done &= sequences_.at(seq_id).done;
    parent.output.finished = all_done;
    if (all_done) parent.output.metrics.finished_time_s = now_s();
    for (CompletionOutput& out : parent.output.outputs) out.text += out.delta_text;
    results.push_back(parent.output);
    for (CompletionOutput& out : parent.output.outputs) {
      out.delta_text.clear();
      out.delta_token_ids.clear();
    }
    if (all_done) retired.push_back(id);
  }
  for (const std::string& id : retired) {
    for (const std::string& seq_id : parents_.at(id).sequence_ids) sequences_.erase(seq_id);
    parents_.erase(id);
  }
  aborted_parents_.clear();
  if (log_step) {
    const KvCacheManager& kv = scheduler_->kv_cache_manager();
    spdlog::debug("{}", format_step(step_summary, scheduler_->num_waiting(),
                                    kv.num_blocks() - kv.num_free_blocks(), kv.num_blocks(),
                                    (now_s() - t_start) * 1e3));
  }
  return results;
}

// ---------------------------------------------------------------------------------------------

Engine::Engine(const EngineArgs& args) : impl_(std::make_unique<Impl>(args)) {}
Engine::~Engine() = default;

void Engine::add_request(const std::string& request_id, const std::string& prompt,
                         const SamplingParams& params) {
  impl_->add(request_id, impl_->tokenizer_.encode(prompt, true), params);
}

void Engine::add_request_tokens(const std::string& request_id,
                                std::vector<int32_t> prompt_token_ids,
                                const SamplingParams& params) {
  impl_->add(request_id, std::move(prompt_token_ids), params);
}

void Engine::abort_request(const std::string& request_id) {
  impl_->abort(request_id);
}

std::vector<RequestOutput> Engine::step() {
  return impl_->step();
}

bool Engine::has_unfinished_requests() const {
  return impl_->scheduler_->has_unfinished_requests();
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
  if (!impl_->chat_template_) {
    fail("{} has no chat template; pass --chat-template FILE", impl_->model_dir_);
  }
  const nlohmann::json messages =
      format_message_contents(nlohmann::json::parse(messages_json), impl_->content_format_);
  nlohmann::json context = nlohmann::json::parse(kwargs_json);
  if (!context.is_object()) fail("chat template arguments must be a JSON object");
  context["bos_token"] = impl_->tokenizer_.bos_token();
  context["eos_token"] = impl_->tokenizer_.eos_token();
  return impl_->chat_template_->render(messages, add_generation_prompt, context);
}

EngineStats Engine::stats() const {
  const Scheduler& s = *impl_->scheduler_;
  EngineStats st;
  st.num_running = s.num_running();
  st.num_waiting = s.num_waiting();
  st.kv_cache_usage = s.kv_cache_manager().usage();
  st.kv_cache_total_bytes = static_cast<int64_t>(impl_->kv_memory_.size_bytes());
  st.num_preemptions = s.num_preemptions();
  st.prefix_cache_queries = s.kv_cache_manager().prefix_cache_stats().num_query_tokens;
  st.prefix_cache_hits = s.kv_cache_manager().prefix_cache_stats().num_hit_tokens;
  st.prompt_tokens = impl_->prompt_tokens_total_;
  st.generation_tokens = impl_->generation_tokens_total_;
  st.prompt_tokens_computed = impl_->prompt_tokens_computed_;
  st.num_steps = impl_->num_steps_;
  st.last_step_num_tokens = impl_->last_step_num_tokens_;
  return st;
}

CacheInfo Engine::cache_info() const {
  CacheInfo c;
  c.block_size = impl_->args_.block_size;
  c.num_blocks = impl_->kv_plan_.num_blocks;
  c.num_bytes = impl_->kv_plan_.num_bytes;
  c.dtype = dtype_name(impl_->kv_cache_->spec().dtype);
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
