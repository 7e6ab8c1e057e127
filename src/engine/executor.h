// Where the model runs: the engine core hands an Executor each step's SchedulerOutput and gets
// the ModelRunnerOutput back. In process today (InProcessExecutor); a multi-process executor
// (tensor or pipeline parallel ranks) implements the same three calls, shipping the plain-data
// SchedulerOutput (engine/serialization.h) to its workers. After vLLM v1's Executor.
// A pipeline-parallel executor also runs several batches at once (max_concurrent_batches).
#pragma once

#include <cstdint>
#include <string>

#include "engine/scheduler_output.h"
#include "model/kv_cache.h"
#include "util/error.h"

namespace pagoda {

class Executor {
 public:
  virtual ~Executor() = default;

  // The bytes one token takes in the KV cache, per the model and the cache dtype.
  virtual const KvCacheSpec& kv_cache_spec() const = 0;
  // Reserves a pool of num_blocks (replacing any earlier one, whose requests must all be gone)
  // and returns how long that took in seconds. Throws pagoda::Error when memory is short.
  virtual double initialize_kv_cache(int32_t num_blocks) = 0;
  // The pool's memory kind for the log ("transparent huge pages", ...).
  virtual std::string kv_cache_memory_kind() const = 0;
  virtual ModelRunnerOutput execute_model(const SchedulerOutput& scheduler_output) = 0;

  // Batches that may be in flight at once: a pipeline's stages (vLLM's
  // max_concurrent_batches). Above 1 the engine core starts batches with start_batch and takes
  // their outputs, in the order they started, from finish_oldest_batch; the requests of a batch
  // in flight are in no other batch until its output is back.
  virtual int max_concurrent_batches() const { return 1; }
  virtual void start_batch(const SchedulerOutput& /*scheduler_output*/) {
    fail("executor: runs one batch at a time (execute_model)");
  }
  virtual ModelRunnerOutput finish_oldest_batch(const SchedulerOutput& /*scheduler_output*/) {
    fail("executor: runs one batch at a time (execute_model)");
  }
};

}  // namespace pagoda
