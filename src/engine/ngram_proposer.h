// The n-gram proposer (prompt lookup decoding, vLLM's method "ngram"): drafts a request's next
// tokens by finding the longest suffix of its tokens (prompt_lookup_max down to
// prompt_lookup_min long) that occurred earlier in them and copying what followed that earlier
// occurrence. No model runs; a draft is only as good as the text repeats (code edits, quoting
// the prompt, loops). After vllm/v1/spec_decode/ngram_proposer.py; the search is our own.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/proposer.h"
#include "engine/speculative_config.h"

namespace pagoda {

class NgramProposer final : public Proposer {
 public:
  explicit NgramProposer(const SpeculativeConfig& config);

  // Each drafting request's propose() below, in parallel.
  void propose(const ExecutionContext& ctx, std::span<const ProposalRequest> requests,
               std::vector<std::vector<int32_t>>& drafts) override;

  // Up to max_tokens (at most num_speculative_tokens) drafted tokens following `tokens`
  // (prompt then outputs), written to `out` (cleared first); empty when no suffix of at least
  // prompt_lookup_min tokens occurred before. Among earlier occurrences of the longest
  // matching suffix the most recent wins: it is the likeliest to continue the same way.
  void propose(std::span<const int32_t> tokens, int32_t max_tokens,
               std::vector<int32_t>& out) const;

 private:
  int32_t num_speculative_tokens_;
  int32_t min_n_;
  int32_t max_n_;
};

}  // namespace pagoda
