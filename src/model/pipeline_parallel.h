// A rank's place in a pipeline-parallel model, as the model sees it: which contiguous layers its
// stage holds, and the links to the stages around it. The first stage embeds, the last applies
// the final norm and lm_head; each stage holds only its layers' weights and KV cache. Between
// stages travels the residual stream h [tokens, hidden] in fp32 (after the last layer of a
// stage h is whole: each layer adds its attention and MLP outputs into it). The logits go from
// the last stage back to rank 0, which samples. A stage's sends are queued (pair_link.h), so
// it goes on to its next micro-batch at once. With tensor parallelism inside each stage,
// rank t of stage s sends to rank t of stage s + 1 (each holds the whole h after its
// all-reduces), and only the last stage's rank 0 sends logits. After GPipe (Huang et al. 2019)
// and vLLM's PPMissingLayer / get_pp_indices split.
#pragma once

#include <cstdint>

#include "parallel/pair_link.h"

namespace pagoda {

// Layers [begin, end) of a model.
struct LayerRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

// vLLM's even split of num_layers over num_stages: every stage gets num_layers / num_stages, and
// the remainder goes one each to the stages just before the last (the last stage also runs
// lm_head, the first the embedding, which is cheap). Throws Error when a stage would be empty.
LayerRange pipeline_stage_layers(int64_t num_layers, int num_stages, int stage);

class PipelineParallel {
 public:
  PipelineParallel() = default;
  // Links the caller owns, which must outlive the model; nullptr where this rank has none:
  // `from_previous` on the first stage, `to_next` on the last, `logits` except on the last
  // stage's rank 0.
  PipelineParallel(int num_stages, int stage, PairLink* from_previous, PairLink* to_next,
                   PairLink* logits)
      : num_stages_(num_stages),
        stage_(stage),
        from_previous_(from_previous),
        to_next_(to_next),
        logits_(logits) {}

  int num_stages() const { return num_stages_; }
  int stage() const { return stage_; }
  bool enabled() const { return num_stages_ > 1; }
  bool is_first() const { return stage_ == 0; }
  bool is_last() const { return stage_ == num_stages_ - 1; }
  LayerRange layers(int64_t num_layers) const {
    return pipeline_stage_layers(num_layers, num_stages_, stage_);
  }

  PairLink* from_previous() const { return from_previous_; }
  PairLink* to_next() const { return to_next_; }
  // On the last stage's rank 0: where the logits go, to rank 0, which samples (its executor
  // receives them, so that its next batch can start first); nullptr elsewhere.
  PairLink* logits() const { return logits_; }

 private:
  int num_stages_ = 1;
  int stage_ = 0;
  PairLink* from_previous_ = nullptr;
  PairLink* to_next_ = nullptr;
  PairLink* logits_ = nullptr;
};

}  // namespace pagoda
