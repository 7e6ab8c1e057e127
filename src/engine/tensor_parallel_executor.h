// Tensor parallelism across processes, after vLLM v1's multiprocess executor: rank 0 runs the
// engine core and this executor, which broadcasts each step's SchedulerOutput to the follower
// ranks, runs its own shard of the forward pass (the model's layers sum and gather over the same
// communicator), samples from the gathered logits, and shares the sampled ids so that every
// rank's runner holds the same tokens. Ranks >= 1 run run_tensor_parallel_follower. A rank that
// dies makes the communicator throw on every other rank: rank 0's step fails with the error,
// and the followers return it.
// Pipeline parallelism runs through the same executor: the followers are the other stages'
// ranks too, and the model passes hidden states and logits between stages inside its forward
// (model/pipeline_parallel.h), so rank 0's step returns once the last stage's logits arrived.
// One batch is in flight at a time: the stages take turns rather than overlap.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/executor.h"
#include "engine/in_process_executor.h"
#include "engine/parallel_groups.h"
#include "engine/rank_channel.h"
#include "parallel/counting_communicator.h"

namespace pagoda {

// Communication of the steps so far, split by kind: decode steps (every request one token)
// and the rest (prefill or mixed), with their token counts.
struct TensorParallelStats {
  int64_t num_decode_steps = 0;
  CommunicationStats decode;
  int64_t num_other_steps = 0;
  int64_t num_other_tokens = 0;
  CommunicationStats other;
};

class TensorParallelExecutor final : public Executor {
 public:
  // `local` runs rank 0's shard; `groups` are those its model was loaded with and must outlive
  // the executor.
  TensorParallelExecutor(std::unique_ptr<InProcessExecutor> local, const ParallelGroups& groups);
  // Tells the followers to return (unless the group already failed).
  ~TensorParallelExecutor() override;

  const KvCacheSpec& kv_cache_spec() const override { return local_->kv_cache_spec(); }
  double initialize_kv_cache(int32_t num_blocks) override;
  std::string kv_cache_memory_kind() const override { return local_->kv_cache_memory_kind(); }
  ModelRunnerOutput execute_model(const SchedulerOutput& scheduler_output) override;

  const TensorParallelStats& stats() const { return stats_; }
  // One line for the log or stderr: per decode step and per prefill token.
  std::string stats_summary() const;

 private:
  std::unique_ptr<InProcessExecutor> local_;
  const ParallelGroups& groups_;
  RankChannel channel_;
  TensorParallelStats stats_;
  bool failed_ = false;  // a collective threw: the group is gone, send nothing more
};

// A follower rank's loop: executes rank 0's commands on `local` (a runner that does not sample)
// until rank 0 sends kShutdown. Throws Error when a rank dies or rank 0 sends garbage.
void run_tensor_parallel_follower(InProcessExecutor& local, Communicator& communicator);

}  // namespace pagoda
