#include "engine/in_process_executor.h"

#include <chrono>

#include "device/cpu_device.h"
#include "util/error.h"
#include "util/progress.h"

namespace pagoda {

InProcessExecutor::InProcessExecutor(Model& model, const KvCacheSpec& spec, int32_t block_size,
                                     ThreadPlacement placement,
                                     SpeculativeConfig speculative_config, bool samples,
                                     Model* draft_model)
    : model_(model),
      spec_(spec),
      block_size_(block_size),
      placement_(std::move(placement)),
      speculative_config_(std::move(speculative_config)),
      samples_(samples),
      draft_model_(draft_model) {
  if (speculative_config_.method == "draft_model" && draft_model_ == nullptr) {
    fail("executor: speculative method draft_model without a draft model");
  }
  place_threads();  // loading quantized in parallel on this thread already; keep it placed
}

void InProcessExecutor::place_threads() {
  if (placed_thread_ == std::this_thread::get_id()) return;
  apply_thread_placement(placement_);
  placed_thread_ = std::this_thread::get_id();
}

double InProcessExecutor::initialize_kv_cache(int32_t num_blocks) {
  // The pool is faulted in now, as vLLM and llama.cpp reserve theirs at startup: a machine
  // short of memory fails here, not mid-request, and no request pays for zeroing fresh pages
  // (a block handed out for the first time would otherwise fault in a 2 MiB huge page under a
  // running decode step).
  runner_.reset();
  kv_cache_.reset();
  kv_memory_ = DeviceBuffer();
  draft_kv_cache_.reset();
  draft_kv_memory_ = DeviceBuffer();
  const int64_t num_bytes = KvCache::bytes_needed(spec_, num_blocks, block_size_);
  AllocationOptions options;
  options.purpose = MemoryPurpose::kKvCache;
  options.prefault = true;
  const auto start = std::chrono::steady_clock::now();
  try {
    Progress reserving("reserving KV cache", static_cast<uint64_t>(num_bytes));
    options.progress = &reserving;
    kv_memory_ = cpu_device().allocate(static_cast<size_t>(num_bytes), options);
  } catch (const Error& e) {
    fail("KV cache pool: {}; lower --kv-cache-space", e.what());
  }
  kv_cache_ = std::make_unique<KvCache>(spec_, num_blocks, block_size_, kv_memory_.data());
  if (draft_model_ != nullptr && samples_) allocate_draft_kv_cache(num_blocks);
  runner_ = std::make_unique<ModelRunner>(model_, *kv_cache_, speculative_config_, samples_,
                                          draft_model_, draft_kv_cache_.get());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void InProcessExecutor::allocate_draft_kv_cache(int32_t num_blocks) {
  KvCacheSpec draft_spec = draft_model_->kv_cache_spec();
  draft_spec.dtype = spec_.dtype;
  const int64_t num_bytes = KvCache::bytes_needed(draft_spec, num_blocks, block_size_);
  AllocationOptions options;
  options.purpose = MemoryPurpose::kKvCache;
  options.prefault = true;
  try {
    draft_kv_memory_ = cpu_device().allocate(static_cast<size_t>(num_bytes), options);
  } catch (const Error& e) {
    fail("draft model's KV cache pool: {}; lower --kv-cache-space", e.what());
  }
  draft_kv_cache_ =
      std::make_unique<KvCache>(draft_spec, num_blocks, block_size_, draft_kv_memory_.data());
}

ModelRunnerOutput InProcessExecutor::execute_model(const SchedulerOutput& scheduler_output) {
  begin_step(scheduler_output);
  return finish_step(scheduler_output);
}

void InProcessExecutor::begin_step(const SchedulerOutput& scheduler_output) {
  if (!runner_) fail("executor: a step before initialize_kv_cache");
  place_threads();
  runner_->begin_step(scheduler_output);
}

std::span<float> InProcessExecutor::oldest_step_logits() {
  if (!runner_) fail("executor: a step before initialize_kv_cache");
  return runner_->oldest_step_logits();
}

ModelRunnerOutput InProcessExecutor::finish_step(const SchedulerOutput& scheduler_output) {
  if (!runner_) fail("executor: a step before initialize_kv_cache");
  place_threads();
  return runner_->finish_step(scheduler_output);
}

void InProcessExecutor::accept_sampled_tokens(std::span<const ScheduledRequest> requests,
                                              std::span<const int32_t> sampled_token_ids) {
  if (!runner_) fail("executor: accept_sampled_tokens before initialize_kv_cache");
  runner_->accept_sampled_tokens(requests, sampled_token_ids);
}

}  // namespace pagoda
