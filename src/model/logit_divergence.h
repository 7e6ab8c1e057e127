// How far a quantized model's next-token distributions drift from the float model's: both
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
// The models must share a vocabulary; `tokens` needs at least 2 entries.
LogitDivergence compare_next_token_distributions(Model& reference, Model& candidate,
                                                 std::span<const int32_t> tokens);

}  // namespace pagoda
