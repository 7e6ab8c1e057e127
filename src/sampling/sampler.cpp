// Per-request sampling; the order of operations is documented in sampler.h.
#include "sampling/sampler.h"

#include "sampling/rejection_sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace pagoda {
namespace {

// Scratch shared by all samplers of a thread: the engine samples one request after another,
// so one vocabulary-sized set of buffers per thread suffices instead of one per request.
struct ThreadScratch {
  SamplingWorkspace workspace;
  std::vector<float> raw_logits;  // [vocab_size] copy kept for the chosen token's logprob
  std::vector<float> probs;       // [vocab_size] the target distribution when verifying a draft
};

ThreadScratch& thread_scratch() {
  thread_local ThreadScratch scratch;
  return scratch;
}

}  // namespace

RequestSampler::RequestSampler(const SamplingParams& params,
                               std::span<const int32_t> prompt_token_ids,
                               std::span<const int32_t> eos_token_ids, uint64_t default_seed)
    : greedy_(params.greedy()),
      temperature_(std::max(params.temperature, kMinTemperature)),
      truncation_{params.top_k, params.top_p, params.min_p},
      num_logprobs_(params.logprobs.has_value() ? std::max(*params.logprobs, 0) : -1),
      min_tokens_(params.min_tokens),
      constraints_(params),
      penalties_(PenaltyParams{params.repetition_penalty, params.frequency_penalty,
                               params.presence_penalty},
                 prompt_token_ids, params.max_tokens),
      seed_(params.seed.value_or(default_seed)),
      rng_(seed_) {
  if (min_tokens_ > 0) {
    // vLLM's _all_stop_token_ids: the model's EOS ids are suppressed even with ignore_eos.
    min_tokens_blocked_ids_.assign(eos_token_ids.begin(), eos_token_ids.end());
    min_tokens_blocked_ids_.insert(min_tokens_blocked_ids_.end(), params.stop_token_ids.begin(),
                                   params.stop_token_ids.end());
    std::sort(min_tokens_blocked_ids_.begin(), min_tokens_blocked_ids_.end());
    min_tokens_blocked_ids_.erase(
        std::unique(min_tokens_blocked_ids_.begin(), min_tokens_blocked_ids_.end()),
        min_tokens_blocked_ids_.end());
  }
  if (num_logprobs_ > 0) top_ids_.reserve(static_cast<size_t>(num_logprobs_));
}

double RequestSampler::process(float* logits, int64_t vocab_size, SampleResult& result) {
  ThreadScratch& scratch = thread_scratch();
  penalties_.reserve(vocab_size);

  // 1. Raw logprobs, before anything touches the row.
  double log_normalizer = 0.0;
  if (num_logprobs_ >= 0) {
    log_normalizer = log_sum_exp(logits, vocab_size);
    if (scratch.raw_logits.size() < static_cast<size_t>(vocab_size)) {
      scratch.raw_logits.resize(static_cast<size_t>(vocab_size));
    }
    std::memcpy(scratch.raw_logits.data(), logits, static_cast<size_t>(vocab_size) * sizeof(float));
    if (num_logprobs_ > 0) {
      top_n_tokens(logits, vocab_size, num_logprobs_, top_ids_);
      result.top_logprobs.reserve(top_ids_.size());
      for (int32_t id : top_ids_) {
        result.top_logprobs.push_back(
            {id, static_cast<float>(static_cast<double>(logits[id]) - log_normalizer)});
      }
    }
  }

  // 2. min_tokens.
  if (num_generated_ < min_tokens_) {
    for (int32_t id : min_tokens_blocked_ids_) {
      if (id >= 0 && id < vocab_size) logits[id] = -std::numeric_limits<float>::infinity();
    }
  }

  // 3. Token constraints and bias, then penalties.
  constraints_.apply(logits, vocab_size);
  penalties_.apply(logits, vocab_size);
  processors_.apply(logits, vocab_size);
  return log_normalizer;
}

void RequestSampler::fill_logprob(int64_t vocab_size, double log_normalizer,
                                  SampleResult& result) const {
  (void)vocab_size;
  if (num_logprobs_ < 0) return;
  result.logprob = static_cast<float>(
      static_cast<double>(thread_scratch().raw_logits[static_cast<size_t>(result.token_id)]) -
      log_normalizer);
}

SampleResult RequestSampler::sample(float* logits, int64_t vocab_size) {
  ThreadScratch& scratch = thread_scratch();
  SampleResult result;
  const double log_normalizer = process(logits, vocab_size, result);

  // 4./5. Greedy, or temperature + truncation + one draw.
  if (greedy_) {
    result.token_id = argmax_token(logits, vocab_size);
  } else {
    if (temperature_ != 1.0f) {
      for (int64_t i = 0; i < vocab_size; ++i) logits[i] /= temperature_;
    }
    const Candidates candidates =
        truncate_logits(logits, vocab_size, truncation_, scratch.workspace);
    const double u = rng_.next_double();
    result.token_id = draw_token(logits, vocab_size, candidates, u, scratch.workspace);
    // Every logit is -inf (all tokens suppressed): fall back to the lowest id, as argmax would.
    if (result.token_id < 0) result.token_id = argmax_token(logits, vocab_size);
  }

  fill_logprob(vocab_size, log_normalizer, result);
  return result;
}

SampleResult RequestSampler::verify(float* logits, int64_t vocab_size, int32_t draft_token_id,
                                    bool& accepted, std::span<const float> draft_probs) {
  ThreadScratch& scratch = thread_scratch();
  SampleResult result;
  const double log_normalizer = process(logits, vocab_size, result);
  if (greedy_) {
    result.token_id = argmax_token(logits, vocab_size);
    accepted = result.token_id == draft_token_id;
    fill_logprob(vocab_size, log_normalizer, result);
    return result;
  }
  if (temperature_ != 1.0f) {
    for (int64_t i = 0; i < vocab_size; ++i) logits[i] /= temperature_;
  }
  // The distribution sample() would draw from, written out densely for the verdict.
  const Candidates candidates = truncate_logits(logits, vocab_size, truncation_, scratch.workspace);
  scratch.probs.assign(static_cast<size_t>(vocab_size), 0.0f);
  double total = 0.0;
  if (candidates.max_logit > -std::numeric_limits<float>::infinity()) {
    const auto weigh = [&](int32_t id) {
      const float w = std::exp(logits[id] - candidates.max_logit);
      scratch.probs[static_cast<size_t>(id)] = w;
      total += w;
    };
    if (candidates.all_tokens) {
      for (int32_t id = 0; id < vocab_size; ++id) weigh(id);
    } else {
      for (int32_t id : candidates.ids) weigh(id);
    }
  }
  if (!(total > 0.0)) {
    // Every logit is -inf (all tokens suppressed): the lowest id, as sample() falls back to.
    result.token_id = argmax_token(logits, vocab_size);
    accepted = result.token_id == draft_token_id;
  } else {
    for (float& p : scratch.probs) p = static_cast<float>(p / total);
    const double u_accept = rng_.next_double();
    const double u_residual = rng_.next_double();
    const DraftVerdict verdict =
        verify_draft_token(scratch.probs, draft_token_id, draft_probs, u_accept, u_residual);
    result.token_id = verdict.token_id;
    accepted = verdict.accepted;
  }
  fill_logprob(vocab_size, log_normalizer, result);
  return result;
}

void RequestSampler::accept(int32_t token_id) {
  ++num_generated_;
  constraints_.accept(token_id);
  penalties_.accept(token_id);
  processors_.accept(token_id);
}

}  // namespace pagoda
