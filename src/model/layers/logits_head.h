// The head of a causal LM: the final norm and the vocabulary projection, over only the rows
// whose logits are wanted (each sequence's sampled last row, or all its rows for prompt
// logprobs) — a prefill chunk of 2,000 tokens projects one row, not 2,000.
#pragma once

#include <cstdint>

#include "device/execution_context.h"
#include "model/forward_batch.h"
#include "model/layers/activation.h"
#include "model/layers/embedding.h"
#include "model/layers/linear.h"
#include "model/layers/rms_norm.h"

namespace pagoda {

class TensorStore;

class LogitsHead {
 public:
  LogitsHead() = default;
  // `model.norm.weight` and `lm_head.weight`; a tied model without its own lm_head reuses the
  // embedding table (quantized as a matrix would be).
  LogitsHead(WeightLoader& loader, const Embedding& embedding, bool tie_word_embeddings,
             int64_t vocab, int64_t hidden, float eps);

  // hidden_states [batch.num_tokens(), hidden] -> logits [batch.num_logit_rows(), vocab].
  void forward(const ExecutionContext& ctx, const ForwardBatch& batch, const float* hidden_states,
               float* logits);

 private:
  RmsNorm norm_;
  Linear lm_head_;
  Activation rows_;  // [logit rows, hidden] the normalised rows that are projected
};

}  // namespace pagoda
