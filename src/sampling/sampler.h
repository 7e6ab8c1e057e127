// RequestSampler: turns one row of logits into the next token of one sequence with vLLM v1's
// semantics (vllm/v1/sample/sampler.py). It owns the sequence's RNG and penalty statistics, so a
// seeded request draws the same tokens whatever else is in the batch.
//
// Per step, in order:
//   1. logprobs (if params.logprobs): log_softmax of the raw logits, before any processing
//      (vLLM v1's default logprobs_mode "raw_logprobs");
//   2. min_tokens: EOS ids and stop_token_ids get -inf until min_tokens tokens were accepted
//      (whether or not ignore_eos is set; stopping itself is the scheduler's job);
//   3. allowed_token_ids, bad_words, logit_bias (token_constraints.h), then penalties:
//      repetition (prompt + output), then frequency and presence (output only);
//   3b. the sequence's logits processors (logits_processor.h), in the order added;
//   4. temperature == 0: argmax (ties to the lowest id), no random draw;
//   5. otherwise: divide by temperature, then min-p, top-k, top-p (vLLM v1 applies min-p before
//      top-k/top-p), then one draw from the remaining distribution.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "pagoda/sampling_params.h"
#include "sampling/logits_ops.h"
#include "sampling/logits_processor.h"
#include "sampling/penalties.h"
#include "sampling/rng.h"
#include "sampling/token_constraints.h"

namespace pagoda {

struct TokenLogprob {
  int32_t token_id;
  float logprob;
};

struct SampleResult {
  int32_t token_id = -1;
  // log-probability of token_id under the raw logits; only computed when params.logprobs is set
  // (0 otherwise).
  float logprob = 0.0f;
  // The params.logprobs most likely tokens under the raw logits, most likely first (ties: lower
  // id first); empty unless params.logprobs > 0.
  std::vector<TokenLogprob> top_logprobs;
};

// One per generated sequence. Not thread-safe; different samplers may run on different threads.
class RequestSampler {
 public:
  // default_seed seeds the RNG when params.seed is unset; the engine should give each request
  // its own (e.g. derived from --seed and the request's index) so unseeded requests differ.
  RequestSampler(const SamplingParams& params, std::span<const int32_t> prompt_token_ids,
                 std::span<const int32_t> eos_token_ids, uint64_t default_seed);

  // logits: [vocab_size], modified in place (it is scratch afterwards). Call once per generated
  // token. After the first call no memory is allocated, except the top_logprobs vector of the
  // result when params.logprobs > 0.
  SampleResult sample(float* logits, int64_t vocab_size);

  // Speculative decoding: the same processing as sample() on this row, then a verdict on the
  // drafted token instead of a free draw. Greedy: the argmax, accepted when it is the draft.
  // Otherwise rejection sampling against the point-mass draft (rejection_sampler.h): the draft
  // with probability p(draft), else a draw from p without it, so the token returned follows p
  // exactly as sample()'s would. The caller accept()s the returned token either way and stops
  // verifying a sequence's drafts at its first rejection.
  // `draft_probs`: the distribution the draft was drawn from ([vocab]), or empty for a
  // deterministic draft (greedy draft model, n-gram lookup).
  SampleResult verify(float* logits, int64_t vocab_size, int32_t draft_token_id, bool& accepted,
                      std::span<const float> draft_probs = {});

  // Records the token actually appended to the sequence (penalties, min_tokens, processors).
  void accept(int32_t token_id);

  void add_logits_processor(std::unique_ptr<LogitsProcessor> processor) {
    processors_.add(std::move(processor));
  }
  LogitsProcessorChain& logits_processors() { return processors_; }

  int num_generated() const { return num_generated_; }
  uint64_t seed() const { return seed_; }

  // Temperatures in (0, kMinTemperature) are raised to it, as vLLM's SamplingParams does, to keep
  // logits / temperature finite.
  static constexpr float kMinTemperature = 1e-2f;

 private:
  // Steps 1-3b of sample(): raw logprobs into `result` (returns the log normalizer), min_tokens,
  // constraints, penalties and processors applied to logits in place.
  double process(float* logits, int64_t vocab_size, SampleResult& result);
  void fill_logprob(int64_t vocab_size, double log_normalizer, SampleResult& result) const;

  bool greedy_;
  float temperature_;
  TruncationParams truncation_;
  int num_logprobs_;  // -1: none requested
  int min_tokens_;
  std::vector<int32_t> min_tokens_blocked_ids_;  // EOS ids and stop_token_ids
  TokenConstraints constraints_;
  PenaltyState penalties_;
  uint64_t seed_;
  SamplingRng rng_;
  int num_generated_ = 0;
  std::vector<int32_t> top_ids_;  // scratch for the top-N logprobs
  LogitsProcessorChain processors_;
};

}  // namespace pagoda
