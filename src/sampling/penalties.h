// Per-sequence token statistics behind the repetition, frequency and presence penalties, kept
// incrementally: accept() updates one token's count, apply() touches only the distinct tokens
// seen so far (never the whole vocabulary, never a rescan of the sequence).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace pagoda {

struct PenaltyParams {
  float repetition_penalty = 1.0f;  // HF/CTRL: over prompt and generated tokens
  float frequency_penalty = 0.0f;   // OpenAI: over generated tokens, times their count
  float presence_penalty = 0.0f;    // OpenAI: over generated tokens, once each
};

class PenaltyState {
 public:
  // max_tokens only sizes the lists of distinct ids up front.
  PenaltyState(const PenaltyParams& params, std::span<const int32_t> prompt_token_ids,
               int max_tokens);

  // True when some penalty is not neutral; otherwise apply() and accept() do nothing.
  bool active() const { return active_; }

  // In vLLM's order (vllm/model_executor/layers/utils.py apply_penalties):
  //   seen in prompt or output: logit > 0 ? logit / repetition : logit * repetition
  //   generated c times:        logit -= frequency * c;  logit -= presence * (c > 0)
  // Ids >= vocab_size are skipped.
  void apply(float* logits, int64_t vocab_size) const;

  // Records a generated token.
  void accept(int32_t token_id);

  // Grows the per-token tables to vocab_size so that later accepts do not allocate.
  void reserve(int64_t vocab_size);

  // The number of times token_id was generated (0 for ids never seen).
  uint32_t output_count(int32_t token_id) const;

 private:
  static constexpr uint8_t kSeen = 1;       // in prompt or output
  static constexpr uint8_t kGenerated = 2;  // in output

  void grow_to(size_t size);

  PenaltyParams params_;
  bool active_ = false;
  std::vector<uint8_t> flags_;           // [>= vocab_size] kSeen | kGenerated
  std::vector<uint32_t> output_counts_;  // [>= vocab_size] times generated
  std::vector<int32_t> seen_ids_;        // distinct ids of prompt and output
  std::vector<int32_t> generated_ids_;   // distinct ids of output
};

}  // namespace pagoda
