// Turns a SchedulerOutput into one forward pass: flattens every scheduled token of every
// request into a ForwardBatch (ids, positions, slot mapping, per-sequence ranges), performs the
// copy-on-write block copies, and returns the logits of the rows that are sampled.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/scheduler_output.h"
#include "model/forward_batch.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace pagoda {

class ModelRunner {
 public:
  ModelRunner(Model& model, KvCache& cache);

  // Runs the step. Afterwards logits_row(i) is the logits of scheduler_output.requests[i]
  // when that request has sample == true (nullptr otherwise).
  void execute(const SchedulerOutput& scheduler_output);
  float* logits_row(size_t scheduled_index);
  int64_t vocab_size() const { return model_.vocab_size(); }

 private:
  Model& model_;
  KvCache& cache_;
  ForwardBatch batch_;
  std::vector<float> logits_;          // [num sampled rows, vocab]
  std::vector<int64_t> logits_index_;  // scheduled index -> row, -1 if not sampled
};

}  // namespace pagoda
