// LogitsProcessor: a per-sequence step that edits a row of logits before the sampler draws from
// it (a grammar mask, logit_bias, banned words), and follows the tokens the sequence accepts.
// RequestSampler runs its processors in the order they were added, after min_tokens and the
// penalties, so each sees the previous ones' -inf and can only narrow the choice further.
//
// rollback(n) undoes the last n accept() calls; speculative decoding needs it when drafted
// tokens are rejected.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace pagoda {

class LogitsProcessor {
 public:
  virtual ~LogitsProcessor() = default;
  // logits: [vocab_size]; set what the processor forbids to -inf, or shift what it biases.
  virtual void apply(float* logits, int64_t vocab_size) = 0;
  virtual void accept(int32_t token_id) = 0;
  // False (and no change) when fewer than num_tokens were accepted.
  virtual bool rollback(int num_tokens) = 0;
};

// The processors of one sequence, applied in order.
class LogitsProcessorChain {
 public:
  void add(std::unique_ptr<LogitsProcessor> processor) {
    processors_.push_back(std::move(processor));
  }
  bool empty() const { return processors_.empty(); }

  void apply(float* logits, int64_t vocab_size) {
    for (auto& p : processors_) p->apply(logits, vocab_size);
  }
  void accept(int32_t token_id) {
    for (auto& p : processors_) p->accept(token_id);
  }
  // All or nothing is not promised across processors; each one checks its own history, and a
  // caller only rolls back tokens it accepted, so none refuses in practice.
  bool rollback(int num_tokens) {
    bool ok = true;
    for (auto& p : processors_) ok = p->rollback(num_tokens) && ok;
    return ok;
  }

 private:
  std::vector<std::unique_ptr<LogitsProcessor>> processors_;
};

}  // namespace pagoda
