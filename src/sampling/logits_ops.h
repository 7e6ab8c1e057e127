// Numerical operations on one row of logits ([vocab_size] floats) that the sampler chains:
// argmax, log-sum-exp, top-N, and the min-p / top-k / top-p truncation followed by one draw.
// The truncation never sorts the whole vocabulary: top-k uses a heap or nth_element, top-p a
// quickselect on probability mass (after skipping tokens too light to survive), and only the few
// tokens around a cut are sorted. tests/sampling/test_logits_ops.cpp checks every function here
// against a plain full-sort reference written from vLLM's definitions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace pagoda {

// Scratch that the truncation and the draw reuse; sized to the vocabulary on first use and then
// never reallocated. Not shared between threads.
struct SamplingWorkspace {
  std::vector<int32_t> ids;    // candidate token ids
  std::vector<float> weights;  // [vocab_size] exp(logit - max), valid only at candidate ids
  std::vector<float> heap;     // top-k values during the heap scan
  void reserve(int64_t vocab_size);
};

// Switches follow vLLM: top_k <= 0 or >= vocab_size is off, top_p >= 1 is off, min_p <= 0 is off.
struct TruncationParams {
  int top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
};

// The tokens that survive truncation. all_tokens means nothing was cut (ids is then empty);
// otherwise ids lists the survivors in no particular order. weights_ready says that
// workspace.weights holds exp(logit - max_logit) for every id in ids.
struct Candidates {
  std::span<const int32_t> ids;
  bool all_tokens = true;
  bool weights_ready = false;
  float max_logit = 0.0f;
};

// Index of the largest logit; ties go to the lowest id (torch.argmax keeps the first maximum).
// NaN never wins; a row with no finite maximum returns 0.
int32_t argmax_token(const float* logits, int64_t vocab_size);

// Largest logit (NaN ignored); -inf for a row of -inf.
float max_logit(const float* logits, int64_t vocab_size);

// log(sum(exp(logits))), computed stably around the maximum with a double accumulator.
double log_sum_exp(const float* logits, int64_t vocab_size);

// The num_top ids with the largest logits, sorted by logit descending, ties by lower id first.
// out is cleared and refilled (reserve it to avoid allocation).
void top_n_tokens(const float* logits, int64_t vocab_size, int num_top, std::vector<int32_t>& out);

// Applies vLLM v1's truncation in its order: min-p (keep p_i >= min_p * p_max), then top-k
// (keep every logit >= the k-th largest, ties included), then top-p (keep, in descending order,
// each token whose predecessors' mass is still < top_p: the smallest head with mass >= top_p).
// -inf logits are never candidates. logits are read, not written.
Candidates truncate_logits(const float* logits, int64_t vocab_size, const TruncationParams& params,
                           SamplingWorkspace& workspace);

// Draws one token from softmax(logits) restricted to candidates, by inverting the cumulative
// distribution at u in [0, 1). When candidates.all_tokens the probabilities are written over
// logits (the caller's row is scratch by then). Returns -1 if no candidate has a finite logit.
int32_t draw_token(float* logits, int64_t vocab_size, const Candidates& candidates, double u,
                   SamplingWorkspace& workspace);

}  // namespace pagoda
