#include "engine/input_processor.h"

#include <algorithm>
#include <span>

#include <nlohmann/json.hpp>

#include "sampling/validate.h"
#include "util/error.h"

namespace pagoda {
namespace {

// vLLM's SamplingParams.update_from_tokenizer: each word is encoded as written (leading
// whitespace dropped) and again after one space, so that it is banned both where it starts the
// text and where it follows a word; the spaced form is kept only when it is a different word
// token of the same length (otherwise it bans nothing the first form does not).
std::vector<std::vector<int32_t>> tokenize_bad_words(const Tokenizer& tokenizer,
                                                     const std::vector<std::string>& words) {
  std::vector<std::vector<int32_t>> sequences;
  for (const std::string& word : words) {
    const size_t start = word.find_first_not_of(" \t\n\r\f\v");
    const std::string stripped = start == std::string::npos ? std::string() : word.substr(start);
    std::vector<int32_t> plain = tokenizer.encode(stripped, false);
    std::vector<int32_t> spaced = tokenizer.encode(" " + stripped, false);
    const bool spaced_differs =
        !plain.empty() && !spaced.empty() && spaced[0] != plain[0] && spaced.size() == plain.size();
    if (!plain.empty()) sequences.push_back(std::move(plain));
    if (spaced_differs) sequences.push_back(std::move(spaced));
  }
  return sequences;
}

// Whether the prompt leaves the model past its reasoning: the last think tag in it is an end
// (a template that closes the thinking itself, e.g. with thinking turned off). A prompt with
// neither tag (R1's template opens <think> itself; older ones leave it to the model) is
// reasoning still, as vLLM's deepseek_r1 parser has it. No end tokens: no reasoning.
bool reasoning_ended(std::span<const int32_t> prompt, const std::vector<int32_t>& start,
                     const std::vector<int32_t>& end) {
  if (end.empty()) return true;
  auto ends_at = [&](size_t pos, const std::vector<int32_t>& tag) {
    return !tag.empty() && pos >= tag.size() &&
           std::equal(tag.begin(), tag.end(), prompt.begin() + static_cast<long>(pos - tag.size()));
  };
  for (size_t pos = prompt.size(); pos > 0; --pos) {
    if (ends_at(pos, end)) return true;
    if (ends_at(pos, start)) return false;
  }
  return false;
}

}  // namespace

InputProcessor::InputProcessor(const Tokenizer& tokenizer, InputProcessorConfig config,
                               std::unique_ptr<ChatTemplate> chat_template,
                               ContentFormat content_format)
    : tokenizer_(tokenizer),
      config_(std::move(config)),
      chat_template_(std::move(chat_template)),
      content_format_(content_format),
      structured_outputs_(tokenizer, config_.vocab_size, config_.eos_token_ids) {}

std::vector<int32_t> InputProcessor::tokenize(const std::string& prompt) const {
  return tokenizer_.encode(prompt, true);
}

std::string InputProcessor::apply_chat_template(const std::string& messages_json,
                                                bool add_generation_prompt,
                                                const std::string& kwargs_json) const {
  if (!chat_template_)
    fail("{} has no chat template; pass --chat-template FILE", config_.model_dir);
  const nlohmann::json messages =
      format_message_contents(nlohmann::json::parse(messages_json), content_format_);
  nlohmann::json context = nlohmann::json::parse(kwargs_json);
  if (!context.is_object()) fail("chat template arguments must be a JSON object");
  context["bos_token"] = tokenizer_.bos_token();
  context["eos_token"] = tokenizer_.eos_token();
  return chat_template_->render(messages, add_generation_prompt, context);
}

std::vector<Request> InputProcessor::process(const std::string& request_id,
                                             std::vector<int32_t> prompt_ids,
                                             const SamplingParams& params) {
  // --max-logprobs -1: as many as the vocabulary has.
  const int max_logprobs = config_.max_logprobs < 0 ? config_.vocab_size : config_.max_logprobs;
  if (std::optional<std::string> problem = validate(params, max_logprobs)) fail("{}", *problem);
  if (params.prompt_logprobs &&
      (*params.prompt_logprobs < 0 || *params.prompt_logprobs > max_logprobs)) {
    fail("prompt_logprobs must be in [0, {}], got {}", max_logprobs, *params.prompt_logprobs);
  }
  for (const auto& [id, bias] : params.logit_bias) {
    if (id >= config_.vocab_size) {
      fail("logit_bias token id {} is outside the vocabulary [0, {})", id, config_.vocab_size);
    }
  }
  if (params.allowed_token_ids) {
    for (int32_t id : *params.allowed_token_ids) {
      if (id >= config_.vocab_size) {
        fail("allowed_token_ids contains token id {}, outside the vocabulary [0, {})", id,
             config_.vocab_size);
      }
    }
  }
  SamplingParams resolved = params;
  resolved.bad_words_token_ids = tokenize_bad_words(tokenizer_, params.bad_words);
  for (const std::vector<int32_t>& word : resolved.bad_words_token_ids) {
    for (int32_t id : word) {
      if (id < 0 || id >= config_.vocab_size) {
        fail("bad_words tokenize to token id {}, outside the vocabulary [0, {})", id,
             config_.vocab_size);
      }
    }
  }
  if (prompt_ids.empty()) fail("the prompt is empty");
  for (int32_t id : prompt_ids) {
    if (id < 0 || id >= config_.vocab_size) {
      fail("prompt token id {} is outside the vocabulary [0, {})", id, config_.vocab_size);
    }
  }
  const int64_t total = static_cast<int64_t>(prompt_ids.size()) + params.max_tokens;
  if (total > config_.max_model_len) {
    fail("the prompt ({} tokens) plus max_tokens ({}) is {} tokens over the context length of {}",
         prompt_ids.size(), params.max_tokens, total - config_.max_model_len,
         config_.max_model_len);
  }

  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  if (params.structured_outputs) grammar = structured_outputs_.compile(*params.structured_outputs);

  const uint64_t base_seed = config_.seed * 0x9E3779B97F4A7C15ull + (++num_requests_);
  std::vector<Request> samples = split_samples(
      Request(request_id, std::move(prompt_ids), std::move(resolved), config_.eos_token_ids));
  for (size_t i = 0; i < samples.size(); ++i) {
    samples[i].sampling_seed = base_seed + i;
    samples[i].grammar = grammar;
    if (grammar &&
        !reasoning_ended(samples[i].prompt_token_ids(), config_.reasoning_start_token_ids,
                         config_.reasoning_end_token_ids)) {
      samples[i].reasoning_end_token_ids = config_.reasoning_end_token_ids;
    }
  }
  // Sample 0 computes the prompt (the others fork its blocks), so it alone produces the prompt
  // logits. A one-token prompt has none to report: its only entry is the empty first one.
  samples.front().wants_prompt_logits =
      params.prompt_logprobs.has_value() && samples.front().num_prompt_tokens() > 1;
  return samples;
}

void InputProcessor::prepare(const SamplingParams& params) {
  if (params.structured_outputs) structured_outputs_.compile(*params.structured_outputs);
}

}  // namespace pagoda
