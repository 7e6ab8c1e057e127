// What attention needs of one forward pass, built once from the ForwardBatch and shared by every
// layer: each sequence's new-token range, context length and block table, and the cache slot of
// every token.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/attention.h"
#include "model/forward_batch.h"

namespace pagoda {

class AttentionBatch {
 public:
  // Keeps pointers into `batch`, which must outlive this step's use.
  void assign(const ForwardBatch& batch) {
    sequences_.clear();  // capacity stays: no allocation once the largest batch has been seen
    for (const ForwardSequence& s : batch.sequences)
      sequences_.push_back({s.token_begin, s.num_tokens, s.context_len, s.block_table});
    slot_mapping_ = batch.slot_mapping.data();
    num_tokens_ = batch.num_tokens();
  }

  const AttentionSequence* sequences() const { return sequences_.data(); }
  int32_t num_sequences() const { return static_cast<int32_t>(sequences_.size()); }
  const int64_t* slot_mapping() const { return slot_mapping_; }  // [num_tokens]
  int64_t num_tokens() const { return num_tokens_; }

 private:
  std::vector<AttentionSequence> sequences_;
  const int64_t* slot_mapping_ = nullptr;
  int64_t num_tokens_ = 0;
};

}  // namespace pagoda
