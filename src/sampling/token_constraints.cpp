// allowed_token_ids, bad_words and logit_bias; see token_constraints.h.
#include "sampling/token_constraints.h"

#include <algorithm>
#include <limits>

namespace pagoda {

TokenConstraints::TokenConstraints(const SamplingParams& params)
    : logit_bias_(params.logit_bias.begin(), params.logit_bias.end()) {
  // vLLM treats an empty allowed list as an error (the validation refuses it); here it simply
  // restricts nothing, so a hand-built SamplingParams cannot ban every token by accident.
  if (params.allowed_token_ids && !params.allowed_token_ids->empty()) {
    restrict_to_allowed_ = true;
    allowed_ids_ = *params.allowed_token_ids;
    std::sort(allowed_ids_.begin(), allowed_ids_.end());
    allowed_ids_.erase(std::unique(allowed_ids_.begin(), allowed_ids_.end()), allowed_ids_.end());
    allowed_logits_.resize(allowed_ids_.size());
  }
  for (const std::vector<int32_t>& word : params.bad_words_token_ids) {
    if (word.empty()) continue;
    bad_words_.push_back(word);
    max_prefix_ = std::max(max_prefix_, word.size() - 1);
  }
  output_.reserve(2 * max_prefix_);
  active_ = restrict_to_allowed_ || !bad_words_.empty() || !logit_bias_.empty();
}

void TokenConstraints::apply(float* logits, int64_t vocab_size) {
  if (!active_) return;
  constexpr float kMasked = -std::numeric_limits<float>::infinity();

  // 1. allowed_token_ids: keep the allowed logits aside, mask the whole row, put them back.
  if (restrict_to_allowed_) {
    for (size_t i = 0; i < allowed_ids_.size(); ++i) {
      const int32_t id = allowed_ids_[i];
      allowed_logits_[i] = id >= 0 && id < vocab_size ? logits[id] : kMasked;
    }
    std::fill(logits, logits + vocab_size, kMasked);
    for (size_t i = 0; i < allowed_ids_.size(); ++i) {
      const int32_t id = allowed_ids_[i];
      if (id >= 0 && id < vocab_size) logits[id] = allowed_logits_[i];
    }
  }

  // 2. bad_words (vllm/v1/sample/ops/bad_words.py): a word of L tokens bans its last token when
  //    the output ends with its first L - 1 (a one-token word: always).
  for (const std::vector<int32_t>& word : bad_words_) {
    const size_t prefix_len = word.size() - 1;
    if (prefix_len > output_.size()) continue;
    if (!std::equal(word.begin(), word.end() - 1,
                    output_.end() - static_cast<std::ptrdiff_t>(prefix_len)))
      continue;
    const int32_t banned = word.back();
    if (banned >= 0 && banned < vocab_size) logits[banned] = kMasked;
  }

  // 3. logit_bias: added as is (OpenAI; the range was checked when the request came in).
  for (const auto& [id, bias] : logit_bias_) {
    if (id >= 0 && id < vocab_size) logits[id] += bias;
  }
}

void TokenConstraints::accept(int32_t token_id) {
  if (max_prefix_ == 0) return;
  if (output_.size() == 2 * max_prefix_) {
    output_.erase(output_.begin(), output_.begin() + static_cast<std::ptrdiff_t>(max_prefix_));
  }
  output_.push_back(token_id);
}

}  // namespace pagoda
