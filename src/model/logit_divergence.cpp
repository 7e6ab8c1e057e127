#include "model/logit_divergence.h"
#include "kernels/host_context.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "util/error.h"

namespace pagoda {
namespace {

constexpr int32_t kBlockSize = 16;

// Logits [tokens.size(), vocab] of every position, from one prefill into a private cache.
std::vector<float> all_position_logits(Model& model, std::span<const int32_t> tokens,
                                       DType kv_dtype) {
  const auto n = static_cast<int32_t>(tokens.size());
  const int32_t num_blocks = (n + kBlockSize - 1) / kBlockSize;
  KvCacheSpec spec = model.kv_cache_spec();
  spec.dtype = kv_dtype;
  std::vector<float> memory(
      static_cast<size_t>((KvCache::bytes_needed(spec, num_blocks, kBlockSize) + 3) / 4));
  KvCache cache(spec, num_blocks, kBlockSize, memory.data());
  std::vector<int32_t> block_table(static_cast<size_t>(num_blocks));
  for (int32_t b = 0; b < num_blocks; ++b) block_table[static_cast<size_t>(b)] = b;

  ForwardBatch batch;
  batch.token_ids.assign(tokens.begin(), tokens.end());
  for (int32_t i = 0; i < n; ++i) {
    batch.positions.push_back(i);
    batch.slot_mapping.push_back(i);  // block b holds positions [16b, 16b + 16)
  }
  ForwardSequence seq;
  seq.token_begin = 0;
  seq.num_tokens = n;
  seq.context_len = n;
  seq.block_table = block_table.data();
  seq.needs_logits = true;
  seq.all_logits = true;
  batch.sequences.push_back(seq);
  std::vector<float> logits(static_cast<size_t>(n) * static_cast<size_t>(model.vocab_size()));
  model.forward(host_execution_context(), batch, cache, logits.data());
  return logits;
}

void log_softmax(const float* x, int64_t n, std::vector<double>& out) {
  out.resize(static_cast<size_t>(n));
  const double max = *std::max_element(x, x + n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(x[i] - max);
  const double log_z = max + std::log(sum);
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = x[i] - log_z;
}

}  // namespace

LogitDivergence compare_next_token_distributions(Model& reference, Model& candidate,
                                                 std::span<const int32_t> tokens,
                                                 DType candidate_kv_dtype) {
  if (reference.vocab_size() != candidate.vocab_size()) {
    fail("cannot compare models with vocabularies of {} and {} tokens", reference.vocab_size(),
         candidate.vocab_size());
  }
  if (tokens.size() < 2) fail("need at least 2 tokens to compare next-token distributions");
  const int64_t vocab = reference.vocab_size();
  const std::vector<float> ref = all_position_logits(reference, tokens, DType::kF32);
  const std::vector<float> cand = all_position_logits(candidate, tokens, candidate_kv_dtype);

  LogitDivergence d;
  d.num_positions = static_cast<int64_t>(tokens.size());
  std::vector<double> lp_ref, lp_cand;
  int64_t agree = 0;
  double abs_diff = 0;
  for (int64_t t = 0; t < d.num_positions; ++t) {
    const float* a = ref.data() + t * vocab;
    const float* b = cand.data() + t * vocab;
    log_softmax(a, vocab, lp_ref);
    log_softmax(b, vocab, lp_cand);
    double kl = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      const auto k = static_cast<size_t>(i);
      kl += std::exp(lp_ref[k]) * (lp_ref[k] - lp_cand[k]);
      abs_diff += std::fabs(a[i] - b[i]);
    }
    kl = std::max(kl, 0.0);  // rounding can leave -1e-12 for identical distributions
    d.mean_kl += kl;
    d.max_kl = std::max(d.max_kl, kl);
    agree += std::max_element(a, a + vocab) - a == std::max_element(b, b + vocab) - b;
  }
  d.mean_kl /= static_cast<double>(d.num_positions);
  d.top1_agreement = static_cast<double>(agree) / static_cast<double>(d.num_positions);
  d.mean_abs_logit_diff = abs_diff / static_cast<double>(d.num_positions * vocab);
  return d;
}

}  // namespace pagoda
