#include "model/layers/logits_head.h"

#include "loader/safetensors.h"
#include "model/weights.h"

namespace pagoda {

LogitsHead::LogitsHead(WeightLoader& loader, const Embedding& embedding, bool tie_word_embeddings,
                       int64_t vocab, int64_t hidden, float eps)
    : norm_(RmsNorm::load(loader, "model.norm.weight", hidden, eps)), rows_(hidden) {
  if (tie_word_embeddings && loader.store().find("lm_head.weight") == nullptr) {
    lm_head_.weight = loader.prepare(embedding.table, "lm_head.weight");
  } else {
    lm_head_ = Linear::load(loader, "lm_head", vocab, hidden);
  }
}

void LogitsHead::forward(const ExecutionContext& ctx, const ForwardBatch& batch,
                         const float* hidden_states, float* logits) {
  const int64_t num_rows = batch.num_logit_rows();
  if (num_rows == 0) return;
  rows_.reserve(ctx, num_rows);
  const int64_t hidden = norm_.size();
  int64_t r = 0;
  for (const ForwardSequence& s : batch.sequences) {
    const int64_t end = s.token_begin + s.num_tokens;
    for (int64_t row = end - s.num_logit_rows(); row < end; ++row, ++r)
      norm_.forward_row(ctx, hidden_states + row * hidden, rows_.row(r));
  }
  lm_head_.forward(ctx, rows_.data(), num_rows, logits);  // [rows, vocab]
}

}  // namespace pagoda
