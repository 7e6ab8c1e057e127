// A model's default sampling settings from its optional `generation_config.json`. Like vLLM,
// these are the defaults a request starts from; anything the request sets wins.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pagoda/sampling_params.h"

namespace pagoda {

struct GenerationConfig {
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  std::optional<double> repetition_penalty;
  std::optional<int64_t> max_new_tokens;
  std::optional<bool> do_sample;
  std::optional<int64_t> bos_token_id;  // a list keeps its first id
  std::vector<int64_t> eos_token_ids;   // int or list in the file

  // Reads DIR/generation_config.json; a missing file gives an empty config. Throws
  // pagoda::Error "DIR/generation_config.json: key 'X' ..." on bad values.
  static GenerationConfig from_dir(const std::string& dir);
  static GenerationConfig from_json(const nlohmann::json& json, const std::string& path);
  // vLLM's --generation-config CHOICE over the model's own config: "auto" keeps it; "vllm"
  // keeps only its BOS and EOS ids, so that the sampling defaults are vLLM's; a directory
  // replaces it with DIR/generation_config.json, which must exist. Throws pagoda::Error.
  static GenerationConfig select(const std::string& choice, GenerationConfig model_config);

  // SamplingParams defaults for this model: vLLM's defaults overlaid with the file's values.
  // `do_sample: false` (transformers' greedy switch) makes the default temperature 0.
  SamplingParams default_sampling_params() const;
};

}  // namespace pagoda
