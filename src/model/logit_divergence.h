// How far a quantized model's (or a 16-bit KV cache's) next-token distributions drift from
// the float model's: both
// models read the same text, and at every position the KL divergence KL(P_ref || P_quant) of
// their softmax distributions is taken (the measure llama.cpp's perplexity tool reports as
// "KLD"). `pagoda bench quality` and the quantization tests use it.
#pragma once

#include <cstdint>
#include <span>

#include "model/model.h"

namespace pagoda {

struct LogitDivergence {
  int64_t num_positions = 0;
  double mean_kl = 0;         // nats, averaged over positions
  double max_kl = 0;          // the worst position
  double top1_agreement = 0;  // fraction of positions whose argmax token is the same
  double mean_abs_logit_diff = 0;
};

// Runs `tokens` through both models in one prefill each (all rows' logits) and compares.
// The reference runs on an fp32 KV cache, the candidate on one of `candidate_kv_dtype`
// (kF32, kF16 or kBF16: what --kv-cache-dtype costs; the prefill's attention reads the cache).
// The models must share a vocabulary (they may be the same model); `tokens` needs at least 2.
LogitDivergence compare_next_token_distributions(Model& reference, Model& candidate,
                                                 std::span<const int32_t> tokens,
                                                 DType candidate_kv_dtype = DType::kF32);

}  // namespace pagoda
