// Rejection sampling of one drafted token against the target distribution.
#include "sampling/rejection_sampler.h"

#include <algorithm>
#include <cassert>

namespace pagoda {
namespace {

// The residual mass of token v: max(p(v) - q(v), 0), q being the point mass at draft_token_id
// when draft_probs is empty.
double residual(std::span<const float> p, std::span<const float> q, int32_t draft_token_id,
                size_t v) {
  if (q.empty()) return static_cast<int32_t>(v) == draft_token_id ? 0.0 : p[v];
  return std::max(static_cast<double>(p[v]) - static_cast<double>(q[v]), 0.0);
}

}  // namespace

DraftVerdict verify_draft_token(std::span<const float> target_probs, int32_t draft_token_id,
                                std::span<const float> draft_probs, double u_accept,
                                double u_residual) {
  assert(draft_token_id >= 0 && static_cast<size_t>(draft_token_id) < target_probs.size());
  assert(draft_probs.empty() || draft_probs.size() == target_probs.size());
  const auto d = static_cast<size_t>(draft_token_id);
  const double p_d = target_probs[d];
  const double q_d = draft_probs.empty() ? 1.0 : static_cast<double>(draft_probs[d]);
  // u < p/q, written without the division (q(d) > 0 for a token the draft proposed).
  if (u_accept * q_d < p_d) return {true, draft_token_id};

  double total = 0.0;
  for (size_t v = 0; v < target_probs.size(); ++v) {
    total += residual(target_probs, draft_probs, draft_token_id, v);
  }
  if (!(total > 0.0)) {
    // p <= q everywhere means p == q, where the draft is always accepted; only rounding gets
    // here. The most likely target token is the safe answer.
    const auto best = std::max_element(target_probs.begin(), target_probs.end());
    return {false, static_cast<int32_t>(best - target_probs.begin())};
  }
  const double target = u_residual * total;
  double cumulative = 0.0;
  int32_t last_positive = -1;
  for (size_t v = 0; v < target_probs.size(); ++v) {
    const double r = residual(target_probs, draft_probs, draft_token_id, v);
    if (r <= 0.0) continue;
    cumulative += r;
    last_positive = static_cast<int32_t>(v);
    if (cumulative > target) return {false, last_positive};
  }
  return {false, last_positive};  // u_residual * total rounded above the sum
}

}  // namespace pagoda
