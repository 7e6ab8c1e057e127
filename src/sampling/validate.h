// Range checks of SamplingParams, with vLLM's limits; the server turns a message into an HTTP 400
// (OpenAI error type "invalid_request_error") and the CLI into a one-line error.
#pragma once

#include <optional>
#include <string>

#include "pagoda/sampling_params.h"

namespace pagoda {

// The largest top-N logprobs a request may ask for by default (vLLM's default max_logprobs;
// OpenAI's limit).
inline constexpr int kMaxLogprobs = 20;

// nullopt when every field is in range; otherwise one message naming the first bad field, its
// value and the allowed range, e.g. "top_p must be in (0, 1], got 1.5".
// `max_logprobs` bounds `logprobs` (the server's --max-logprobs).
std::optional<std::string> validate(const SamplingParams& params, int max_logprobs = kMaxLogprobs);

}  // namespace pagoda
