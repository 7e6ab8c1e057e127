// The input of one forward pass: every scheduled token of every request, flattened.
// Decodes (one token) and prefill chunks (many) sit side by side; nothing here says which
// is which, because attention only needs each sequence's new-token range and context length.
#pragma once

#include <cstdint>
#include <vector>

namespace pagoda {

struct ForwardSequence {
  int32_t token_begin = 0;  // first row of this sequence in token_ids/positions
  int32_t num_tokens = 0;   // new tokens this step
  int32_t context_len = 0;  // tokens in the KV cache after this step (new ones included)
  const int32_t* block_table = nullptr;  // block ids covering [0, context_len)
  bool needs_logits = false;             // its last row is sampled this step
  // Every row of this step gets logits, not only the last (prompt logprobs: row j predicts the
  // token after it). Independent of needs_logits, so a prefill chunk that stops short of the
  // prompt's end can ask for its rows too.
  bool all_logits = false;
  // Speculative decoding: the last num_draft_tokens tokens are drafts; with needs_logits the
  // row before each draft and the last row get logits (1 + num_draft_tokens rows), so one
  // forward verifies every draft and yields the token after the last.
  int32_t num_draft_tokens = 0;

  // Logits rows this sequence contributes: the last num_logit_rows() of its tokens.
  int32_t num_logit_rows() const {
    return all_logits ? num_tokens : (needs_logits ? 1 + num_draft_tokens : 0);
  }
};

struct ForwardBatch {
  std::vector<int32_t> token_ids;     // [num_tokens]
  std::vector<int32_t> positions;     // [num_tokens]
  std::vector<int64_t> slot_mapping;  // [num_tokens] block_id * block_size + offset
  std::vector<ForwardSequence> sequences;

  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  int64_t num_logit_rows() const {
    int64_t n = 0;
    for (const ForwardSequence& s : sequences) n += s.num_logit_rows();
    return n;
  }
  void clear() {
    token_ids.clear();
    positions.clear();
    slot_mapping.clear();
    sequences.clear();
  }
};

}  // namespace pagoda
