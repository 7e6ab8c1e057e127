// Tensor parallelism across processes, after vLLM v1's multiprocess executor: rank 0 runs the
// engine core and this executor, which broadcasts each step's SchedulerOutput to the follower
// ranks, runs its own shard of the forward pass (the model's layers sum and gather over the same
// communicator), samples from the gathered logits, and sends the sampled ids after it so that
// every rank's runner holds the same tokens. Ranks >= 1 run run_tensor_parallel_follower. A rank
// that dies makes the communicator throw on every other rank: rank 0's step fails with the
// error, and the followers return it.
// Pipeline parallelism runs through the same executor. Rank 0's commands reach its own stage's
// tensor ranks by broadcast and the later stages along the pipeline links (each stage passes a
// command on before it runs it, so a link carries a batch's command ahead of its hidden states).
// The model passes hidden states between stages inside its forward (model/pipeline_parallel.h);
// the last stage sends the logits to rank 0, which receives them when the engine asks for that
// batch's output. So with queued links (parallel/pair_link.h) up to one batch per stage is in
// flight: rank 0 starts batch k + 1 while later stages run batch k, as vLLM's engine core does
// with its batch queue (step_with_batch_queue).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/executor.h"
#include "engine/in_process_executor.h"
#include "engine/parallel_groups.h"
#include "engine/rank_channel.h"
#include "parallel/counting_communicator.h"

namespace pagoda {

// Communication of the steps so far, split by kind: decode steps (every request one token)
// and the rest (prefill or mixed), with their token counts; and the most batches that were in
// flight at once.
struct TensorParallelStats {
  int max_batches_in_flight = 0;
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
  // The pipeline's stages when its links queue their sends, else 1.
  int max_concurrent_batches() const override;
  void start_batch(const SchedulerOutput& scheduler_output) override;
  ModelRunnerOutput finish_oldest_batch(const SchedulerOutput& scheduler_output) override;

  const TensorParallelStats& stats() const { return stats_; }
  // One line for the log or stderr: per decode step and per prefill token.
  std::string stats_summary() const;

 private:
  // To every follower, through channels_.
  void send(RankCommand command, std::span<const uint8_t> payload = {});
  // Adds a batch's communication since `before` to the decode or prefill/mixed totals.
  void count(const SchedulerOutput& batch, const CommunicationStats& before, bool started);

  std::unique_ptr<InProcessExecutor> local_;
  const ParallelGroups& groups_;
  // Where rank 0's commands go: the world's broadcast (one stage), or its stage's tensor group
  // and the link to the next stage.
  std::vector<RankChannel> channels_;
  TensorParallelStats stats_;
  int num_in_flight_ = 0;
  bool failed_ = false;  // a collective threw: the group is gone, send nothing more
};

// A follower rank's loop: executes rank 0's commands on `local` (a runner that does not sample)
// until rank 0 sends kShutdown, passing each on to the next pipeline stage first. Throws Error
// when a rank dies or rank 0 sends garbage.
void run_tensor_parallel_follower(InProcessExecutor& local, const ParallelGroups& groups);

}  // namespace pagoda
