// Speculative decoding's verification step for one drafted token (Leviathan et al. 2023,
// "Fast Inference from Transformers via Speculative Decoding", and Chen et al. 2023; vLLM v1's
// vllm/v1/sample/rejection_sampler.py): with the target model's distribution p and the draft's
// q at a position, the drafted token d is accepted with probability min(1, p(d) / q(d)); on
// rejection a token is drawn from the residual max(p - q, 0), renormalised. The emitted token is
// then distributed exactly as p, whatever q is. A deterministic draft (n-gram lookup) is the
// point mass q = 1{d}: accept with probability p(d), else draw from p with d removed.
#pragma once

#include <cstdint>
#include <span>

namespace pagoda {

struct DraftVerdict {
  bool accepted = false;
  int32_t token_id = -1;  // the draft when accepted, else the token drawn from the residual
};

// target_probs: p, [vocab], non-negative, summing to 1 (up to rounding). draft_probs: q,
// [vocab] likewise, or empty for the point mass at draft_token_id. u_accept and u_residual are
// independent uniform draws in [0, 1).
DraftVerdict verify_draft_token(std::span<const float> target_probs, int32_t draft_token_id,
                                std::span<const float> draft_probs, double u_accept,
                                double u_residual);

}  // namespace pagoda
