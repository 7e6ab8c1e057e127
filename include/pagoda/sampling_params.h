// Per-request sampling settings, with vLLM's names and defaults (vllm.SamplingParams).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace pagoda {

// What each RequestOutput of a request holds (vLLM's RequestOutputKind): everything so far
// (text, token_ids and logprobs cumulative, plus what the step added in delta_text and
// delta_token_ids); only what is new since the previous output (prompt_token_ids and
// prompt_logprobs in the first output only: a stream costs O(length), not O(length^2)); or
// one output when the request finishes.
enum class RequestOutputKind { kCumulative, kDelta, kFinalOnly };

// Constrained decoding (vLLM's StructuredOutputsParams): at most one of json, regex, choice,
// grammar and json_object is set; generation then follows that grammar and may end (EOS) only
// where the grammar is complete.
struct StructuredOutputsParams {
  std::optional<std::string> json;                 // JSON Schema, as text
  std::optional<std::string> regex;                // the whole output matches it
  std::optional<std::vector<std::string>> choice;  // exactly one of these strings
  std::optional<std::string> grammar;              // EBNF / GBNF, start rule "root"
  bool json_object = false;                        // any JSON object
  // Free whitespace between JSON tokens; by default it is bounded, so a confused model cannot
  // emit spaces until max_tokens.
  bool any_whitespace = false;

  // How many of the constraints are set (valid: exactly one).
  int num_constraints() const {
    return int{json.has_value()} + int{regex.has_value()} + int{choice.has_value()} +
           int{grammar.has_value()} + int{json_object};
  }
  friend bool operator==(const StructuredOutputsParams&, const StructuredOutputsParams&) = default;
};

struct SamplingParams {
  int n = 1;                        // samples of one prompt; they share the prompt's KV blocks
  float temperature = 1.0f;         // 0 means greedy
  float top_p = 1.0f;               // (0, 1]
  int top_k = 0;                    // 0 or -1: off
  float min_p = 0.0f;               // [0, 1]
  float presence_penalty = 0.0f;    // [-2, 2], on generated tokens (OpenAI semantics)
  float frequency_penalty = 0.0f;   // [-2, 2], on generated tokens
  float repetition_penalty = 1.0f;  // > 0, on prompt and generated tokens (HF/CTRL semantics)
  std::optional<uint64_t> seed;     // same seed, same prompt -> same tokens
  std::vector<std::string> stop;    // stop strings, not included in the output
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  int max_tokens = 16;
  int min_tokens = 0;           // EOS and stop token ids are suppressed until then
  std::optional<int> logprobs;  // top-N logprobs per generated token (0 = just the chosen)
  // top-N logprobs per prompt token (0 = just the prompt token). The prompt is then computed
  // whole, without prefix-cache reuse: a cached prefix has no logits.
  std::optional<int> prompt_logprobs;
  // OpenAI's logit_bias: token id -> bias in [-100, 100], added to the token's logit before
  // penalties and sampling (-100/100 in effect ban/force the token).
  std::map<int32_t, float> logit_bias;
  // vLLM's allowed_token_ids: when set (and not empty), every other token is masked out.
  std::optional<std::vector<int32_t>> allowed_token_ids;
  // vLLM's bad_words: never generated. A word that tokenizes to one token bans that token; a
  // longer one bans its last token whenever the output so far ends with the others.
  std::vector<std::string> bad_words;
  // bad_words as token sequences (each word without and, where it tokenizes differently, with
  // a leading space, as vLLM's update_from_tokenizer does). The engine fills it from bad_words
  // when a request is added; whatever a caller puts here is replaced.
  std::vector<std::vector<int32_t>> bad_words_token_ids;
  bool skip_special_tokens = true;
  bool include_stop_str_in_output = false;

  RequestOutputKind output_kind = RequestOutputKind::kCumulative;
  std::optional<StructuredOutputsParams> structured_outputs;

  bool greedy() const { return temperature <= 0.0f; }
  friend bool operator==(const SamplingParams&, const SamplingParams&) = default;
};

}  // namespace pagoda
