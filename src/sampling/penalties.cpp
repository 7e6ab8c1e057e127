// Incremental penalty bookkeeping; see penalties.h.
#include "sampling/penalties.h"

#include <algorithm>

namespace pagoda {

PenaltyState::PenaltyState(const PenaltyParams& params, std::span<const int32_t> prompt_token_ids,
                           int max_tokens)
    : params_(params),
      active_(params.repetition_penalty != 1.0f || params.frequency_penalty != 0.0f ||
              params.presence_penalty != 0.0f) {
  if (!active_) return;
  int32_t max_id = -1;
  for (int32_t id : prompt_token_ids) max_id = std::max(max_id, id);
  grow_to(static_cast<size_t>(max_id + 1));
  generated_ids_.reserve(static_cast<size_t>(std::max(max_tokens, 0)));
  seen_ids_.reserve(std::min(prompt_token_ids.size(), flags_.size()) +
                    static_cast<size_t>(std::max(max_tokens, 0)));
  for (int32_t id : prompt_token_ids) {
    if (id < 0) continue;
    if (!(flags_[id] & kSeen)) {
      flags_[id] |= kSeen;
      seen_ids_.push_back(id);
    }
  }
}

void PenaltyState::grow_to(size_t size) {
  if (flags_.size() >= size) return;
  flags_.resize(size, 0);
  output_counts_.resize(size, 0);
}

void PenaltyState::reserve(int64_t vocab_size) {
  if (active_) grow_to(static_cast<size_t>(vocab_size));
}

void PenaltyState::accept(int32_t token_id) {
  if (!active_ || token_id < 0) return;
  grow_to(static_cast<size_t>(token_id) + 1);
  if (!(flags_[token_id] & kSeen)) seen_ids_.push_back(token_id);
  if (!(flags_[token_id] & kGenerated)) generated_ids_.push_back(token_id);
  flags_[token_id] |= kSeen | kGenerated;
  ++output_counts_[token_id];
}

uint32_t PenaltyState::output_count(int32_t token_id) const {
  if (token_id < 0 || static_cast<size_t>(token_id) >= output_counts_.size()) return 0;
  return output_counts_[token_id];
}

void PenaltyState::apply(float* logits, int64_t vocab_size) const {
  if (!active_) return;
  const float repetition = params_.repetition_penalty;
  if (repetition != 1.0f) {
    for (int32_t id : seen_ids_) {
      if (id >= vocab_size) continue;
      float& logit = logits[id];
      logit = logit > 0.0f ? logit / repetition : logit * repetition;
    }
  }
  const float frequency = params_.frequency_penalty;
  const float presence = params_.presence_penalty;
  if (frequency != 0.0f || presence != 0.0f) {
    for (int32_t id : generated_ids_) {
      if (id >= vocab_size) continue;
      logits[id] -= frequency * static_cast<float>(output_counts_[id]);
      logits[id] -= presence;
    }
  }
}

}  // namespace pagoda
