// Speculative decoding settings, parsed from vLLM's `--speculative-config` JSON
// (vllm/config/speculative.py): which proposer drafts tokens and how many per step: the n-gram
// proposer (prompt lookup) or DeepSeek-V3's MTP layers; the other vLLM methods are refused by
// name.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace pagoda {

struct SpeculativeConfig {
  std::string method;  // "" (off), "ngram" or "mtp" ("deepseek_mtp" is read as "mtp")
  // Tokens drafted per request per step; the target model verifies them in the same forward.
  int32_t num_speculative_tokens = 0;
  // ngram: the longest and shortest suffix of a request's tokens looked up earlier in them.
  int32_t prompt_lookup_max = 0;
  int32_t prompt_lookup_min = 0;

  bool enabled() const { return !method.empty() && num_speculative_tokens > 0; }
};

// Parses the JSON object vLLM takes, e.g. {"method": "ngram", "num_speculative_tokens": 4,
// "prompt_lookup_max": 4, "prompt_lookup_min": 1}. An empty string is speculation off. Like
// vLLM, when only one of prompt_lookup_min/max is given the other takes its value, and when
// neither is, both are 5. Throws pagoda::Error naming the key for an unknown key, a value of the
// wrong type or range, or a method that is not supported ("draft_model", ...). mtp takes only
// num_speculative_tokens (default 1, as vLLM).
SpeculativeConfig parse_speculative_config(std::string_view json_text);

}  // namespace pagoda
