// SamplingParams range checks (vllm/sampling_params.py _verify_args).
#include "sampling/validate.h"

#include <cmath>

#include <fmt/format.h>

namespace pagoda {

std::optional<std::string> validate(const SamplingParams& params, int max_logprobs) {
  // Written as !(in range) so that NaN is rejected too.
  if (params.n < 1) return fmt::format("n must be at least 1, got {}", params.n);
  if (!(params.presence_penalty >= -2.0f && params.presence_penalty <= 2.0f)) {
    return fmt::format("presence_penalty must be in [-2, 2], got {}", params.presence_penalty);
  }
  if (!(params.frequency_penalty >= -2.0f && params.frequency_penalty <= 2.0f)) {
    return fmt::format("frequency_penalty must be in [-2, 2], got {}", params.frequency_penalty);
  }
  if (!(params.repetition_penalty > 0.0f && std::isfinite(params.repetition_penalty))) {
    return fmt::format("repetition_penalty must be greater than zero, got {}",
                       params.repetition_penalty);
  }
  if (!(params.temperature >= 0.0f && std::isfinite(params.temperature))) {
    return fmt::format("temperature must be non-negative, got {}", params.temperature);
  }
  if (!(params.top_p > 0.0f && params.top_p <= 1.0f)) {
    return fmt::format("top_p must be in (0, 1], got {}", params.top_p);
  }
  if (params.top_k < -1) {
    return fmt::format("top_k must be -1 or 0 (disable), or at least 1, got {}", params.top_k);
  }
  if (!(params.min_p >= 0.0f && params.min_p <= 1.0f)) {
    return fmt::format("min_p must be in [0, 1], got {}", params.min_p);
  }
  if (params.max_tokens < 1) {
    return fmt::format("max_tokens must be at least 1, got {}", params.max_tokens);
  }
  if (params.min_tokens < 0) {
    return fmt::format("min_tokens must be greater than or equal to 0, got {}", params.min_tokens);
  }
  if (params.min_tokens > params.max_tokens) {
    return fmt::format("min_tokens must be less than or equal to max_tokens={}, got {}",
                       params.max_tokens, params.min_tokens);
  }
  if (params.logprobs.has_value() && (*params.logprobs < 0 || *params.logprobs > max_logprobs)) {
    return fmt::format("logprobs must be in [0, {}], got {}", max_logprobs, *params.logprobs);
  }
  for (int32_t id : params.stop_token_ids) {
    if (id < 0) return fmt::format("stop_token_ids must be non-negative, got {}", id);
  }
  // OpenAI's range for logit_bias (vLLM clamps to it instead; out of range is more likely a
  // mistake than an intent).
  for (const auto& [id, bias] : params.logit_bias) {
    if (id < 0) return fmt::format("logit_bias token ids must be non-negative, got {}", id);
    if (!(bias >= -100.0f && bias <= 100.0f)) {
      return fmt::format("logit_bias values must be in [-100, 100], got {} for token {}", bias, id);
    }
  }
  if (params.allowed_token_ids) {
    if (params.allowed_token_ids->empty())
      return std::string("allowed_token_ids must not be empty");
    for (int32_t id : *params.allowed_token_ids) {
      if (id < 0) return fmt::format("allowed_token_ids must be non-negative, got {}", id);
    }
  }
  for (const std::string& word : params.bad_words) {
    if (word.find_first_not_of(" \t\n\r\f\v") == std::string::npos) {
      return std::string("bad_words must not contain empty or whitespace-only words");
    }
  }
  return std::nullopt;
}

}  // namespace pagoda
