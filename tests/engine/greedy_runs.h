// What the speculative-decoding tests (ngram, mtp, draft_model) share: greedy sampling params,
// and a batch of token prompts run to completion, keyed by request id, so that a run with
// drafts can be compared token for token with one without.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "pagoda/engine.h"

namespace pagoda::greedy_runs {

inline SamplingParams greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

// Adds prompt i as request "i" and steps the engine until every request has finished.
inline std::map<std::string, std::vector<int32_t>> run(
    Engine& engine, const std::vector<std::vector<int32_t>>& prompts,
    const SamplingParams& params) {
  for (size_t i = 0; i < prompts.size(); ++i) {
    engine.add_request_tokens(std::to_string(i), prompts[i], params);
  }
  std::map<std::string, std::vector<int32_t>> outputs;
  while (engine.has_unfinished_requests()) {
    for (const RequestOutput& out : engine.step()) {
      if (out.finished) outputs[out.request_id] = out.outputs.front().token_ids;
    }
  }
  return outputs;
}

// The same, keeping each request's whole output (token ids, logprobs).
inline std::map<std::string, CompletionOutput> run_outputs(
    Engine& engine, const std::vector<std::vector<int32_t>>& prompts,
    const SamplingParams& params) {
  for (size_t i = 0; i < prompts.size(); ++i) {
    engine.add_request_tokens(std::to_string(i), prompts[i], params);
  }
  std::map<std::string, CompletionOutput> outputs;
  while (engine.has_unfinished_requests()) {
    for (const RequestOutput& out : engine.step()) {
      if (out.finished) outputs[out.request_id] = out.outputs.front();
    }
  }
  return outputs;
}

}  // namespace pagoda::greedy_runs
