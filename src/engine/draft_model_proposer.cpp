// DraftModelProposer: catch the draft cache up with the target's tokens, then k batched draft
// steps.
#include "engine/draft_model_proposer.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/host_context.h"
#include "sampling/logits_ops.h"

namespace pagoda {

DraftModelProposer::DraftModelProposer(Model& model, KvCache& cache, int32_t num_speculative_tokens)
    : model_(model),
      cache_(cache),
      num_speculative_tokens_(num_speculative_tokens),
      context_(host_execution_context()) {}

void DraftModelProposer::add_sequence(const ProposalRequest& request, int32_t start,
                                      std::span<const int32_t> tokens, bool needs_logits) {
  const int32_t block_size = cache_.block_size();
  ForwardSequence seq;
  seq.token_begin = static_cast<int32_t>(batch_.token_ids.size());
  seq.num_tokens = static_cast<int32_t>(tokens.size());
  seq.context_len = start + seq.num_tokens;
  seq.block_table = request.block_ids.data();
  seq.needs_logits = needs_logits;
  for (int32_t j = 0; j < seq.num_tokens; ++j) {
    const int32_t position = start + j;
    batch_.token_ids.push_back(tokens[static_cast<size_t>(j)]);
    batch_.positions.push_back(position);
    const int64_t block = request.block_ids[static_cast<size_t>(position / block_size)];
    batch_.slot_mapping.push_back(block * block_size + position % block_size);
  }
  batch_.sequences.push_back(seq);
}

int32_t DraftModelProposer::choose(const ProposalRequest& request, State& state, const float* row) {
  const int64_t vocab = model_.vocab_size();
  if (request.temperature <= 0.0f) return argmax_token(row, vocab);
  // q = softmax(logits / temperature), handed to the rejection sampler as the draft's
  // distribution; the token is drawn from q exactly as stored (float), by inverse CDF.
  float max_logit = -std::numeric_limits<float>::infinity();
  for (int64_t v = 0; v < vocab; ++v) max_logit = std::max(max_logit, row[v]);
  weights_.resize(static_cast<size_t>(vocab));
  double total = 0.0;
  for (int64_t v = 0; v < vocab; ++v) {
    const double w = std::exp(static_cast<double>(row[v] - max_logit) / request.temperature);
    weights_[static_cast<size_t>(v)] = w;
    total += w;
  }
  std::vector<float>& probs = *request.draft_probs;
  const size_t base = probs.size();
  probs.resize(base + static_cast<size_t>(vocab));
  double stored_total = 0.0;
  for (int64_t v = 0; v < vocab; ++v) {
    const auto q = static_cast<float>(weights_[static_cast<size_t>(v)] / total);
    probs[base + static_cast<size_t>(v)] = q;
    stored_total += q;
  }
  const double u = state.rng.next_double() * stored_total;
  double cumulative = 0.0;
  int32_t last_positive = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    const float q = probs[base + static_cast<size_t>(v)];
    if (q <= 0.0f) continue;
    last_positive = static_cast<int32_t>(v);
    cumulative += q;
    if (u < cumulative) return last_positive;
  }
  return last_positive;  // u rounded up to the total
}

void DraftModelProposer::propose(const ExecutionContext& /*ctx*/,
                                 std::span<const ProposalRequest> requests,
                                 std::vector<std::vector<int32_t>>& drafts) {
  const int32_t block_size = cache_.block_size();
  const int64_t vocab = model_.vocab_size();
  const size_t n = requests.size();
  // Per request: its state, drafts still to make, and its logits row in the last forward.
  std::vector<State*> states(n, nullptr);
  std::vector<int32_t> num_drafts(n, 0);
  std::vector<int64_t> rows(n, -1);
  drafts.resize(n);

  // 1. Catch up: feed what the draft cache lacks of each request's tokens; a request to draft
  //    for feeds at least its last token, whose row gives the first draft.
  batch_.clear();
  int64_t num_rows = 0;
  for (size_t i = 0; i < n; ++i) {
    const ProposalRequest& r = requests[i];
    auto [it, inserted] = states_.try_emplace(*r.request_id);
    State& state = it->second;
    states[i] = &state;
    if (inserted) state.rng = SamplingRng(r.seed ^ 0x6a09e667f3bcc908ULL);  // not the target's
    drafts[i].clear();
    // The tokens the target holds or computes next step: all of a request that sampled (its
    // last token is the one to draft after); a prompt chunk's up to the chunk's end.
    const std::span<const int32_t> tokens =
        r.wants_drafts ? r.token_ids
                       : r.token_ids.first(std::min(
                             r.token_ids.size(),
                             static_cast<size_t>(r.first_position + r.num_kept_positions)));
    const auto num_tokens = static_cast<int32_t>(tokens.size());
    if (r.readmitted) {
      const auto kept = std::min(r.first_position, num_tokens);
      state.cached.assign(tokens.begin(), tokens.begin() + kept);
    }
    // The cache agrees with the request up to the first token that differs (a rejected draft).
    size_t agree = 0;
    const size_t limit = std::min(state.cached.size(), tokens.size());
    while (agree < limit && state.cached[agree] == tokens[agree]) ++agree;
    state.cached.resize(agree);

    // Positions the block table covers (the scheduler's lookahead); draft j is computed from
    // the token fed at position num_tokens - 2 + j.
    const auto capacity = static_cast<int32_t>(r.block_ids.size()) * block_size;
    const int32_t fed_end = std::min(num_tokens, capacity);
    if (r.wants_drafts && fed_end == num_tokens) {
      num_drafts[i] = std::clamp(capacity - num_tokens + 1, 0, num_speculative_tokens_);
    }
    auto start = static_cast<int32_t>(agree);
    if (num_drafts[i] > 0) start = std::min(start, num_tokens - 1);
    if (start >= fed_end) continue;
    add_sequence(
        r, start,
        tokens.subspan(static_cast<size_t>(start)).first(static_cast<size_t>(fed_end - start)),
        num_drafts[i] > 0);
    state.cached.assign(tokens.begin(), tokens.begin() + fed_end);
    if (num_drafts[i] > 0) rows[i] = num_rows++;
  }

  // 2. Draft steps: the rows give each request's next draft; feed it (but the last) and go on.
  while (!batch_.sequences.empty()) {
    logits_.resize(static_cast<size_t>(num_rows * vocab));
    model_.forward(context_, batch_, cache_, logits_.data());
    batch_.clear();
    num_rows = 0;
    for (size_t i = 0; i < n; ++i) {
      if (rows[i] < 0) continue;
      const ProposalRequest& r = requests[i];
      const int32_t draft = choose(r, *states[i], logits_.data() + rows[i] * vocab);
      drafts[i].push_back(draft);
      rows[i] = -1;
      if (static_cast<int32_t>(drafts[i].size()) == num_drafts[i]) continue;
      const auto position = static_cast<int32_t>(states[i]->cached.size());
      const int32_t fed[1] = {draft};
      add_sequence(r, position, fed, true);
      states[i]->cached.push_back(draft);
      rows[i] = num_rows++;
    }
  }
}

}  // namespace pagoda
