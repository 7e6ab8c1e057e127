// The head of a causal LM: the final norm and the vocabulary projection, over only the rows
// whose logits are wanted (each sequence's sampled last row, or all its rows for prompt
// logprobs) — a prefill chunk of 2,000 tokens projects one row, not 2,000.
// Tensor parallel: the projection is vocabulary-parallel, each rank computing the logits of its
// vocabulary range (the embedding's), and the ranks gather them into whole rows before
// sampling (Megatron-LM's parallel lm_head with a gather, as vLLM's LogitsProcessor does).
#pragma once

#include <cstdint>
#include <string>

#include "device/execution_context.h"
#include "model/forward_batch.h"
#include "model/layers/activation.h"
#include "model/layers/embedding.h"
#include "model/layers/linear.h"
#include "model/layers/rms_norm.h"
#include "model/tensor_parallel.h"

namespace pagoda {

class TensorStore;

class LogitsHead {
 public:
  LogitsHead() = default;
  // `model.norm.weight` and `lm_head.weight`; a tied model without its own lm_head reuses the
  // embedding table (quantized as a matrix would be).
  // With tensor parallelism the projection holds the embedding's vocabulary range. A head stored
  // under other names (DeepSeek's MTP shared_head) passes them; the head's name has no
  // ".weight".
  LogitsHead(WeightLoader& loader, const Embedding& embedding, bool tie_word_embeddings,
             int64_t vocab, int64_t hidden, float eps, const TensorParallel& tp = {},
             const std::string& norm_name = "model.norm.weight",
             const std::string& head_name = "lm_head");

  // hidden_states [batch.num_tokens(), hidden] -> logits [batch.num_logit_rows(), vocab].
  void forward(const ExecutionContext& ctx, const ForwardBatch& batch, const float* hidden_states,
               float* logits);

 private:
  RmsNorm norm_;
  Linear lm_head_;
  Activation rows_;  // [logit rows, hidden] the normalised rows that are projected
  // Tensor parallel only: the vocabulary, each rank's padded part of it, and the group.
  int64_t vocab_ = 0;
  int64_t part_ = 0;
  Communicator* gather_ = nullptr;
  Activation local_;     // [logit rows, part] this rank's logits
  Activation gathered_;  // [ranks, logit rows, part] every rank's, rank-major
};

}  // namespace pagoda
