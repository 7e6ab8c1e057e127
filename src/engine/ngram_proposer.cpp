// NgramProposer: suffix lookup over one request's tokens.
#include "engine/ngram_proposer.h"

#include <algorithm>
#include <cassert>
#include <limits>

namespace pagoda {

NgramProposer::NgramProposer(const SpeculativeConfig& config)
    : num_speculative_tokens_(config.num_speculative_tokens),
      min_n_(config.prompt_lookup_min),
      max_n_(config.prompt_lookup_max) {
  assert(min_n_ >= 1 && min_n_ <= max_n_);
}

void NgramProposer::propose(std::span<const int32_t> tokens, int32_t max_tokens,
                            std::vector<int32_t>& out) const {
  out.clear();
  const int64_t k = std::min(max_tokens, num_speculative_tokens_);
  const auto length = static_cast<int64_t>(tokens.size());
  if (k <= 0) return;
  // Scan start positions from the most recent backwards; the first start whose match with the
  // suffix reaches max_n ends the search, otherwise the longest match seen (first found wins
  // ties, so the most recent) is used. An occurrence must end before the suffix starts being
  // compared with itself: start + n <= length - 1, so at least one token follows it.
  int64_t best_start = -1;
  int64_t best_n = 0;
  for (int64_t start = length - 2; start >= 0 && best_n < max_n_; --start) {
    // Length of the common suffix of tokens[.. start] and tokens[.. length - 1], capped.
    int64_t n = 0;
    while (n < max_n_ && start - n >= 0 && tokens[start - n] == tokens[length - 1 - n]) ++n;
    if (n >= min_n_ && n > best_n) {
      best_n = n;
      best_start = start;
    }
  }
  if (best_start < 0) return;
  // Copy what followed the occurrence; it can run into the suffix itself (a loop repeats).
  for (int64_t i = best_start + 1; i < length && static_cast<int64_t>(out.size()) < k; ++i) {
    out.push_back(tokens[i]);
  }
}

void NgramProposer::propose(const ExecutionContext& /*ctx*/,
                            std::span<const ProposalRequest> requests,
                            std::vector<std::vector<int32_t>>& drafts) {
  drafts.resize(requests.size());
  const auto count = static_cast<int64_t>(requests.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < count; ++i) {
    const ProposalRequest& r = requests[static_cast<size_t>(i)];
    std::vector<int32_t>& out = drafts[static_cast<size_t>(i)];
    out.clear();
    if (r.wants_drafts) propose(r.token_ids, std::numeric_limits<int32_t>::max(), out);
  }
}

}  // namespace pagoda
