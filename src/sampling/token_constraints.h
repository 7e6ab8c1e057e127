// TokenConstraints: the per-request logits processors that restrict or bias single tokens:
// vLLM's allowed_token_ids and bad_words, and OpenAI's logit_bias. Applied in vLLM v1's order
// (vllm/v1/sample/sampler.py): the allowed-token mask, then bad words, then the bias, all before
// the penalties. Each costs only the tokens it names per step, never a pass over the vocabulary,
// except the allowed-token mask (one fill of the row).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "pagoda/sampling_params.h"

namespace pagoda {

class TokenConstraints {
 public:
  // Reads allowed_token_ids, bad_words_token_ids and logit_bias (bad_words itself must have
  // been tokenized into bad_words_token_ids already).
  explicit TokenConstraints(const SamplingParams& params);

  // False when the request sets none of the three; apply() and accept() then do nothing.
  bool active() const { return active_; }

  // logits: [vocab_size], in place. Masked tokens get -inf; ids >= vocab_size are skipped.
  void apply(float* logits, int64_t vocab_size);

  // Records a generated token (bad words look at the output's last tokens).
  void accept(int32_t token_id);

 private:
  bool active_ = false;
  bool restrict_to_allowed_ = false;
  std::vector<int32_t> allowed_ids_;             // sorted, distinct
  std::vector<float> allowed_logits_;            // [allowed_ids_.size()] scratch while masking
  std::vector<std::vector<int32_t>> bad_words_;  // non-empty token sequences
  std::vector<std::pair<int32_t, float>> logit_bias_;
  // Output tokens: only the last max_prefix_ matter; the front is dropped in bulk when the
  // buffer reaches twice that, so accept() never allocates after construction.
  size_t max_prefix_ = 0;
  std::vector<int32_t> output_;
};

}  // namespace pagoda
