// The executor that runs the model in the engine's own process: the KV pool (faulted in at
// reservation), the model runner over it, and the kernel threads placed as --threads and
// --cpu-bind say, on whichever thread drives the steps.
#pragma once

#include <memory>
#include <span>
#include <thread>

#include "device/device.h"
#include "engine/executor.h"
#include "engine/model_runner.h"
#include "engine/speculative_config.h"
#include "kernels/thread_placement.h"
#include "model/model.h"

namespace pagoda {

class InProcessExecutor final : public Executor {
 public:
  // `model` must outlive the executor. `samples` false: a tensor-parallel follower's runner
  // (ModelRunner), which learns the sampled tokens through accept_sampled_tokens.
  // `draft_model` (method draft_model; must outlive the executor) gets a KV cache of its own
  // with as many blocks as the target's, in the spec's KV dtype.
  InProcessExecutor(Model& model, const KvCacheSpec& spec, int32_t block_size,
                    ThreadPlacement placement, SpeculativeConfig speculative_config = {},
                    bool samples = true, Model* draft_model = nullptr);

  const KvCacheSpec& kv_cache_spec() const override { return spec_; }
  double initialize_kv_cache(int32_t num_blocks) override;
  std::string kv_cache_memory_kind() const override { return std::string(kv_memory_.kind_name()); }
  ModelRunnerOutput execute_model(const SchedulerOutput& scheduler_output) override;
  // ModelRunner's two halves of execute_model, for a pipeline's first stage (model_runner.h).
  void begin_step(const SchedulerOutput& scheduler_output);
  std::span<float> oldest_step_logits();
  ModelRunnerOutput finish_step(const SchedulerOutput& scheduler_output);
  void accept_sampled_tokens(std::span<const ScheduledRequest> requests,
                             std::span<const int32_t> sampled_token_ids);

 private:
  // OpenMP settings are per thread, and the server's engine thread is not the one that built
  // the engine: apply the placement on the first step of each new driving thread.
  void place_threads();
  // The draft model's KV cache: num_blocks blocks, like the target's, in the target's KV dtype.
  void allocate_draft_kv_cache(int32_t num_blocks);

  Model& model_;
  KvCacheSpec spec_;
  int32_t block_size_;
  ThreadPlacement placement_;
  SpeculativeConfig speculative_config_;
  bool samples_ = true;
  std::thread::id placed_thread_;
  DeviceBuffer kv_memory_;
  std::unique_ptr<KvCache> kv_cache_;
  Model* draft_model_ = nullptr;
  DeviceBuffer draft_kv_memory_;
  std::unique_ptr<KvCache> draft_kv_cache_;
  std::unique_ptr<ModelRunner> runner_;
};

}  // namespace pagoda
