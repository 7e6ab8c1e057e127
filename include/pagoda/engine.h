// Pagoda's public C++ API: an engine that serves many requests at once from one paged KV
// cache (continuous batching, prefix caching, chunked prefill), and the offline `generate`.
//
//   pagoda::EngineArgs args;
//   args.model = "/models/deepseek-coder-1.3b-instruct";
//   pagoda::Engine engine(args);
//   auto outputs = engine.generate({"def fib(n):"}, {pagoda::SamplingParams{.max_tokens = 64}});
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pagoda/error.h"
#include "pagoda/export.h"
#include "pagoda/sampling_params.h"

namespace pagoda {

// Engine settings, with vLLM's names where vLLM has one.
struct EngineArgs {
  std::string model;      // HF model directory, GGUF file or Hub repo id (`demo` is the CLI's)
  std::string tokenizer;  // defaults to `model`
  // Models by name (`org/name`, `org/name:Q4_K_M`; docs/models.md): the branch, tag or commit
  // (vLLM's --revision; "" the default branch), the tokenizer repo's (--tokenizer-revision),
  // the cache to download into instead of the Hub's (--download-dir), and one GGUF file of the
  // repo to run (--gguf-file).
  std::string revision;
  std::string tokenizer_revision;
  std::string download_dir;
  std::string gguf_file;
  std::string served_model_name;  // defaults to the directory name
  // Overrides tokenizer_config.json's template: a file, or (as vLLM) the template text itself
  // when no such file exists and the value holds a '{', '}' or newline.
  std::string chat_template;
  // How message contents reach the template (vLLM's --chat-template-content-format): "string"
  // (content parts joined into one string), "openai" (a list of {"type": "text", "text"}
  // parts, strings wrapped into one), or "auto" (openai when the template loops over a
  // message's content).
  std::string chat_template_content_format = "auto";
  // Where the default sampling settings come from (vLLM's --generation-config): "auto" (the
  // model's generation_config.json), "vllm" (vLLM's defaults; the file's EOS ids still count),
  // or a directory holding a generation_config.json.
  std::string generation_config = "auto";
  // The reasoning parser the server splits output with (vLLM's --reasoning-parser): "" or
  // "deepseek_r1". With one, a structured-output grammar applies after the reasoning's end
  // (</think>), so the reasoning stays free.
  std::string reasoning_parser;
  // The most top-N logprobs a request may ask for (vLLM's --max-logprobs); -1: the vocabulary.
  int32_t max_logprobs = 20;
  int32_t max_model_len = 0;  // 0: the model's max_position_embeddings
  // A max_model_len above max_position_embeddings is an error unless this is set (vLLM's
  // VLLM_ALLOW_LONG_MAX_MODEL_LEN): then a warning, and positions past the trained length.
  bool allow_long_max_model_len = false;
  int32_t max_num_seqs = 256;
  int32_t max_num_batched_tokens = 2048;
  int32_t block_size = 16;
  uint64_t kv_cache_space_bytes = 0;  // 0: a quarter of available memory, capped by need
  // Offline runs (generate, chat, bench latency, Python): reserve no pool at start; size it,
  // whenever requests wait and none runs, to what those requests can use (prompt + max_tokens
  // of each sample, whole blocks; at least double the previous pool), never above the pool
  // the rule above would reserve. A one-prompt run then reserves megabytes, not a quarter of
  // the machine. A pool that grows is reallocated, which empties the prefix cache. `serve`
  // keeps a pool reserved at start: memory it cannot get should fail the start, not a request.
  bool kv_cache_by_need = false;
  // Element type of the KV cache: "auto" (fp16, llama.cpp's default), "fp32", "fp16" or
  // "bf16". The 16-bit types halve the cache's memory and the bytes attention streams per
  // step, at the cost of rounding each cached k/v value once.
  std::string kv_cache_dtype = "auto";
  bool enable_prefix_caching = true;
  bool enable_chunked_prefill = true;
  // vLLM's --long-prefill-token-threshold, --max-num-partial-prefills and
  // --max-long-partial-prefills (SchedulerConfig in engine/scheduler.h says what they do).
  int32_t long_prefill_token_threshold = 0;
  int32_t max_num_partial_prefills = 1;
  int32_t max_long_partial_prefills = 1;
  uint64_t seed = 0;
  int32_t num_threads = 0;  // 0: all cores
  // Pin the kernel threads: "none", "cores" (one per physical core) or a CPU list "0-3,8".
  std::string cpu_bind = "none";
  // Weight files "mmap"ed, or copied into "huge-pages" at load (util/mapped_file.h); "auto":
  // huge pages when the weights are used as stored, a map when they are only read once to be
  // quantized (--quantization), converted (FP8) or repacked (GGUF files; `pagoda quantize`
  // int8 checkpoints on kernels that read int8 lane panels). engine/weights_memory.h.
  std::string weights_memory = "auto";
  // Where the key of weights that `pagoda encrypt` wrote comes from (src/crypto/model_key.h):
  // a file, a shell command printing it, or an environment variable the caller saw set; all
  // empty for plain weights. The key is read at load and dropped once the weights are decrypted.
  std::string model_key_file;
  std::string model_key_command;
  std::string model_key_environment_variable;
  // Weight quantization at load: "" (as stored), "int8" or "int4". Checkpoints that are
  // already quantized (pagoda quantize, AWQ/GPTQ, GGUF) load as they are either way.
  std::string quantization;
  int32_t quantization_group_size = 0;  // 0: per output channel for int8, 32 for int4
  // What FP8 checkpoints' e4m3 matrices become at load: "int8" (groups of the FP8 block width),
  // "int4" (groups of 32) or "dequant" (exact fp32, the reference). docs/quantization.md.
  std::string fp8_weights = "int8";
  bool int8_activations = true;  // false: weight-only (fp32 activations)
  // Speculative decoding, as vLLM's --speculative-config JSON, e.g. {"method": "ngram",
  // "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 1}; "" off.
  // docs/speculative_decoding.md.
  std::string speculative_config;
  // Tensor parallelism on one machine (docs/parallel.md): this process is rank
  // `tensor_parallel_rank` of `tensor_parallel_size` processes that find each other by
  // `tensor_parallel_job_id` (a shared-memory segment). Rank 0 builds the Engine; the others
  // call run_tensor_parallel_follower with the same arguments. `pagoda generate/serve -tp N`
  // starts the others itself.
  // Pipeline parallelism (vLLM's --pipeline-parallel-size): the layers split into this many
  // stages, each of tensor_parallel_size ranks; tensor_parallel_rank then numbers every rank of
  // the tensor_parallel_size x pipeline_parallel_size, stage by stage.
  int32_t tensor_parallel_size = 1;
  int32_t pipeline_parallel_size = 1;
  int32_t tensor_parallel_rank = 0;
  std::string tensor_parallel_job_id;
  // The ranks are MPI processes (`mpirun -np N pagoda ...`, possibly on several machines): the
  // group is MPI_COMM_WORLD, whose size must be tensor_parallel_size and whose rank this
  // process's tensor_parallel_rank; no job id. Needs a build with MPI.
  bool tensor_parallel_mpi = false;
};

struct TokenLogprobInfo {
  int32_t token_id = 0;
  std::string token;  // the token's text
  float logprob = 0.0f;
  int32_t rank = 0;  // 1 for the most likely token; 0 where not computed (generated tokens)
};

// One position's logprobs: the token that is there (sampled, or the prompt's) and the most
// likely alternatives. Also used for prompt tokens (params.prompt_logprobs).
struct GeneratedTokenLogprobs {
  TokenLogprobInfo chosen;
  std::vector<TokenLogprobInfo> top;  // params.logprobs most likely, best first
};

struct CompletionOutput {
  int32_t index = 0;               // which of the n samples
  std::string text;                // cumulative text (stop strings removed)
  std::vector<int32_t> token_ids;  // cumulative generated ids
  std::string delta_text;          // what this step added (streaming)
  std::vector<int32_t> delta_token_ids;
  std::vector<GeneratedTokenLogprobs> logprobs;  // cumulative, when params.logprobs is set
  std::string finish_reason;                     // "", "stop", "length", "abort"
  std::optional<std::string> stop_reason;        // the stop string matched, if any
  bool finished() const { return !finish_reason.empty(); }
};

struct RequestMetrics {
  double arrival_time_s = 0;  // steady-clock seconds
  double first_scheduled_time_s = 0;
  double first_token_time_s = 0;
  double last_token_time_s = 0;
  double finished_time_s = 0;
};

struct RequestOutput {
  std::string request_id;
  std::vector<int32_t> prompt_token_ids;
  std::vector<CompletionOutput> outputs;  // one per sample (n)
  // params.prompt_logprobs set: one entry per prompt token, as vLLM's RequestOutput has it. The
  // first is empty (nothing precedes it); entry i is token i given tokens [0, i), with the
  // prompt_logprobs most likely alternatives. Complete once the prompt is computed, i.e. in
  // every output that carries a generated token; empty when not requested.
  std::vector<std::optional<GeneratedTokenLogprobs>> prompt_logprobs;
  int32_t num_cached_tokens = 0;  // prompt tokens served from the prefix cache
  bool finished = false;          // every sample finished
  RequestMetrics metrics;
};

// The routed experts that steps of one kind ran, for an MoE model (all zero for a dense one).
// A MoE layer streams the weights of the union of the experts its tokens were routed to, so
// this is what makes a step of more tokens (1 + k per request when verifying drafts) cost more.
struct ExpertStepStats {
  int64_t num_steps = 0;
  int64_t num_tokens = 0;          // tokens those steps computed
  int64_t num_moe_layers = 0;      // MoE layer passes (steps x MoE layers)
  int64_t num_routed_experts = 0;  // distinct routed experts of each pass, summed
  // Mean distinct routed experts a MoE layer ran per step.
  double experts_per_layer() const {
    return num_moe_layers > 0
               ? static_cast<double>(num_routed_experts) / static_cast<double>(num_moe_layers)
               : 0.0;
  }
  ExpertStepStats operator-(const ExpertStepStats& o) const {
    return {num_steps - o.num_steps, num_tokens - o.num_tokens, num_moe_layers - o.num_moe_layers,
            num_routed_experts - o.num_routed_experts};
  }
};

// Engine-wide counters for /metrics and benchmarks (a snapshot).
struct EngineStats {
  int32_t num_running = 0;
  int32_t num_waiting = 0;
  double kv_cache_usage = 0;  // fraction of blocks in use
  int64_t kv_cache_total_bytes = 0;
  int64_t num_preemptions = 0;
  int64_t prefix_cache_queries = 0;    // tokens looked up
  int64_t prefix_cache_hits = 0;       // tokens found
  int64_t prompt_tokens = 0;           // of the requests added
  int64_t prompt_tokens_computed = 0;  // run through the model (not from the prefix cache)
  int64_t generation_tokens = 0;
  int64_t num_steps = 0;             // steps that ran a forward pass
  int32_t last_step_num_tokens = 0;  // tokens the latest of them computed (prefill + decode)
  // Speculative decoding: requests verified with drafts (vllm:spec_decode_num_drafts), drafted
  // tokens verified, of those accepted, and accepted per draft position (0 = first draft).
  int64_t spec_num_drafts = 0;
  int64_t spec_num_draft_tokens = 0;
  int64_t spec_num_accepted_tokens = 0;
  std::vector<int64_t> spec_num_accepted_tokens_per_pos;
  // Steps in which every request was past its prompt: those without drafts (plain decoding)
  // and those verifying drafts (docs/speculative_decoding.md, "Measuring").
  ExpertStepStats decode_experts;
  ExpertStepStats verify_experts;
};

// The KV cache as sized at load: for the startup log and /metrics (vLLM's cache_config_info).
struct CacheInfo {
  int32_t block_size = 0;
  int32_t num_blocks = 0;
  int64_t num_bytes = 0;
  std::string dtype;  // "fp16", "bf16", "fp32"
  bool enable_prefix_caching = false;
};

class PAGODA_API Engine {
 public:
  explicit Engine(const EngineArgs& args);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Streaming core, driven by one thread: add requests, call step() until idle. A prompt is
  // text (tokenized with the model's tokenizer, BOS as its config says) or token ids.
  // Throws pagoda::Error for invalid parameters or a prompt that does not fit.
  void add_request(const std::string& request_id, const std::string& prompt,
                   const SamplingParams& params);
  void add_request_tokens(const std::string& request_id, std::vector<int32_t> prompt_token_ids,
                          const SamplingParams& params);
  void abort_request(const std::string& request_id);
  // Does the slow part of admitting a request with `params` ahead of add_request (compiling its
  // structured-output grammar), on the calling thread, so that the stepping thread does not stall
  // on it. Thread-safe, unlike the rest of the streaming core. Throws what add_request would for
  // a grammar that does not compile.
  void prepare_request(const SamplingParams& params);
  // Runs one scheduler step and one forward pass; returns the requests that made progress.
  std::vector<RequestOutput> step();
  bool has_unfinished_requests() const;

  // Offline: runs until all are done. `on_output` (optional) sees every step's outputs.
  std::vector<RequestOutput> generate(
      const std::vector<std::string>& prompts, const std::vector<SamplingParams>& params,
      const std::function<void(const RequestOutput&)>& on_output = {});

  // Tokenizer and chat template of the model.
  std::vector<int32_t> encode(const std::string& text, bool add_special_tokens) const;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const;
  // messages: JSON array of {role, content, ...}; kwargs: JSON object of extra template vars.
  std::string apply_chat_template(const std::string& messages_json, bool add_generation_prompt,
                                  const std::string& kwargs_json = "{}") const;

  EngineStats stats() const;
  CacheInfo cache_info() const;
  const EngineArgs& args() const;
  std::string model_name() const;
  int32_t max_model_len() const;
  SamplingParams default_sampling_params() const;  // from generation_config.json
  // Tensor parallel: bytes and time of communication per decode step and per prefill token so
  // far, one line; "" in one process.
  std::string communication_summary() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// A tensor-parallel follower (args.tensor_parallel_rank >= 1): loads its shard of the model
// as rank 0 does, then runs rank 0's steps until rank 0 shuts down. Throws pagoda::Error when a
// rank dies or the model does not split.
PAGODA_API void run_tensor_parallel_follower(const EngineArgs& args);

}  // namespace pagoda
