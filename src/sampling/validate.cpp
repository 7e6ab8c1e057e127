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
  return std::nullopt;
}

}  // namespace pagoda
