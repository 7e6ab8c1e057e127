// Speculative decoding settings, parsed from vLLM's `--speculative-config` JSON
// (vllm/config/speculative.py): which proposer drafts tokens and how many per step: the n-gram
// proposer (prompt lookup), DeepSeek-V3's MTP layers or a draft model; the other vLLM methods
// are refused by name.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace pagoda {

struct SpeculativeConfig {
  // "" (off), "ngram", "mtp" ("deepseek_mtp" is read as "mtp") or "draft_model".
  std::string method;
  // Tokens drafted per request per step; the target model verifies them in the same forward.
  int32_t num_speculative_tokens = 0;
  // ngram: the longest and shortest suffix of a request's tokens looked up earlier in them.
  int32_t prompt_lookup_max = 0;
  int32_t prompt_lookup_min = 0;
  // draft_model: the draft's directory (or Hub name), a model with the target's tokenizer.
  std::string model;

  bool enabled() const { return !method.empty() && num_speculative_tokens > 0; }
};

// Parses the JSON object vLLM takes, e.g. {"method": "ngram", "num_speculative_tokens": 4,
// "prompt_lookup_max": 4, "prompt_lookup_min": 1}. An empty string is speculation off. Like
// vLLM, when only one of prompt_lookup_min/max is given the other takes its value, and when
// neither is, both are 5. {"model": PATH, "num_speculative_tokens": k} without a method is
// {"method": "draft_model", ...}, as in vLLM. Throws pagoda::Error naming the key for an unknown
// key, a value of the wrong type or range, or a method that is not supported ("eagle", ...). mtp
// takes only num_speculative_tokens (default 1, as vLLM).
SpeculativeConfig parse_speculative_config(std::string_view json_text);

}  // namespace pagoda
