// The front of the engine: turns what a caller sends (text or token ids, chat messages,
// SamplingParams) into validated Requests for the engine core, once, so nothing after it
// validates again. Tokenizes, renders the chat template, checks parameters and lengths, and
// splits n > 1 into samples with their seeds. After vLLM v1's InputProcessor.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/request.h"
#include "engine/structured_outputs.h"
#include "pagoda/sampling_params.h"
#include "template/chat_template.h"
#include "template/chat_template_options.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

struct InputProcessorConfig {
  std::string model_dir;  // named in errors
  int32_t max_model_len = 0;
  int32_t vocab_size = 0;     // the model's (ids at or past it are refused)
  int32_t max_logprobs = 20;  // -1: the vocabulary
  uint64_t seed = 0;          // --seed: unseeded requests draw from seeds derived from it
  std::vector<int32_t> eos_token_ids;
  // A reasoning model's think tags as token ids (empty: no reasoning parser). A grammar then
  // applies after the output's think end, unless the prompt already closed the reasoning.
  std::vector<int32_t> reasoning_start_token_ids;
  std::vector<int32_t> reasoning_end_token_ids;
};

class InputProcessor {
 public:
  // `tokenizer` must outlive the processor; chat_template may be null (none known).
  InputProcessor(const Tokenizer& tokenizer, InputProcessorConfig config,
                 std::unique_ptr<ChatTemplate> chat_template, ContentFormat content_format);

  std::vector<int32_t> tokenize(const std::string& prompt) const;
  // messages: JSON array of {role, content, ...}; kwargs: JSON object of extra template vars.
  std::string apply_chat_template(const std::string& messages_json, bool add_generation_prompt,
                                  const std::string& kwargs_json) const;

  // The request as the engine core takes it: one Request per sample (n > 1: "<id>#<i>", the
  // leader first). Throws pagoda::Error for invalid parameters or a prompt that does not fit,
  // grammar::GrammarError for structured_outputs that do not compile (the grammar is compiled
  // here, on the caller's thread, and cached by its spec).
  std::vector<Request> process(const std::string& request_id, std::vector<int32_t> prompt_ids,
                               const SamplingParams& params);

  // Compiles what `params` will need (its structured-output grammar) into the cache, so that
  // process() on the engine thread finds it ready. Thread-safe; may run on any thread while the
  // engine steps. Throws as process() does for a spec that does not compile.
  void prepare(const SamplingParams& params);

  const InputProcessorConfig& config() const { return config_; }

 private:
  const Tokenizer& tokenizer_;
  InputProcessorConfig config_;
  std::unique_ptr<ChatTemplate> chat_template_;
  ContentFormat content_format_;
  uint64_t num_requests_ = 0;
  StructuredOutputCompiler structured_outputs_;
};

}  // namespace pagoda
