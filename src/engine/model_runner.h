// Turns a SchedulerOutput into one forward pass: flattens every scheduled token of every
// request into a ForwardBatch (ids, positions, slot mapping, per-sequence ranges), performs the
// copy-on-write block copies, and returns the logits of the rows that are sampled (and of every
// prompt row of a request asking for prompt logprobs).
#pragma once

#include <cstdint>
#include <vector>

#include "device/execution_context.h"
#include "engine/scheduler_output.h"
#include "model/forward_batch.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace pagoda {

class ModelRunner {
 public:
  ModelRunner(Model& model, KvCache& cache);

  // The logits rows of one scheduled request: row j is the prediction after the token at
  // position first_position + j.
  struct LogitsRows {
    float* data = nullptr;  // [num_rows, vocab]
    int32_t first_position = 0;
    int32_t num_rows = 0;
  };

  // Runs the step. Afterwards logits_row(i) is the logits of scheduler_output.requests[i]
  // when that request has sample == true (nullptr otherwise), and logits_rows(i) every row
  // computed for it: all of its new tokens when all_logits is set, else the sampled row.
  void execute(const SchedulerOutput& scheduler_output);
  float* logits_row(size_t scheduled_index);
  LogitsRows logits_rows(size_t scheduled_index);
  int64_t vocab_size() const { return model_.vocab_size(); }

 private:
  Model& model_;
  KvCache& cache_;
  ExecutionContext context_;  // the host's: the CPU device and this CPU's kernel table
  ForwardBatch batch_;
  std::vector<float> logits_;  // [num logit rows, vocab]
  // Per scheduled index: its first row in logits_ (-1 if none) and the position of that row.
  std::vector<int64_t> logits_index_;
  std::vector<int32_t> logits_first_position_;
};

}  // namespace pagoda
