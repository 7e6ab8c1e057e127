#include "model/layers/logits_head.h"

#include <algorithm>

#include "loader/safetensors.h"
#include "model/weights.h"

namespace pagoda {

LogitsHead::LogitsHead(WeightLoader& loader, const Embedding& embedding, bool tie_word_embeddings,
                       int64_t vocab, int64_t hidden, float eps, const TensorParallel& tp,
                       const std::string& norm_name, const std::string& head_name)
    : norm_(RmsNorm::load(loader, norm_name, hidden, eps)), rows_(hidden) {
  // The embedding holds this rank's vocabulary range (all of it on one rank); so does the head.
  if (tie_word_embeddings && loader.store().find(head_name + ".weight") == nullptr) {
    lm_head_.weight = loader.prepare(embedding.table, head_name + ".weight");
  } else {
    lm_head_ = Linear::load_rows(loader, head_name, vocab, hidden, embedding.vocab_range);
  }
  if (tp.enabled()) {
    vocab_ = vocab;
    part_ = tp.padded_part(vocab);
    gather_ = tp.reducer();
    local_.set_row_size(part_);
    gathered_.set_row_size(part_ * tp.size());
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
  if (gather_ == nullptr) {
    lm_head_.forward(ctx, rows_.data(), num_rows, logits);  // [rows, vocab]
    return;
  }
  // [rows, part]: the last rank's range may be shorter; its padding columns are never read.
  local_.reserve(ctx, num_rows);
  gathered_.reserve(ctx, num_rows);
  lm_head_.forward(ctx, rows_.data(), num_rows, local_.data(), part_);
  gather_->all_gather(local_.data(), gathered_.data(),
                      static_cast<size_t>(num_rows * part_) * sizeof(float));
  const int ranks = gather_->world_size();
  for (int rank = 0; rank < ranks; ++rank) {
    const int64_t first = rank * part_;
    const int64_t count = std::min(part_, vocab_ - first);
    const float* src = gathered_.data() + rank * num_rows * part_;
    for (int64_t row = 0; row < num_rows; ++row)
      std::copy_n(src + row * part_, count, logits + row * vocab_ + first);
  }
}

}  // namespace pagoda
