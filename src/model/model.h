// The interface every model family implements: one forward pass over a flattened batch,
// reading and writing the paged KV cache. A family is one file plus one registry line.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "device/execution_context.h"
#include "model/forward_batch.h"
#include "model/kv_cache.h"
#include "model/pipeline_parallel.h"
#include "model/tensor_parallel.h"
#include "model/weights.h"

namespace pagoda {

struct ModelConfig;
class TensorStore;

class Model {
 public:
  virtual ~Model() = default;

  virtual int64_t vocab_size() const = 0;
  virtual KvCacheSpec kv_cache_spec() const = 0;
  virtual int64_t num_parameters() const = 0;
  virtual int64_t weight_bytes() const = 0;

  // Runs every token of `batch`, writes their K/V into `cache`, and fills `logits`
  // [batch.num_logit_rows(), vocab_size()] with the last num_logit_rows() rows of each
  // sequence (its last row when it needs_logits, every row when all_logits), in order.
  // Runs on `ctx`: its device's memory for activations, its kernels, its threads.
  virtual void forward(const ExecutionContext& ctx, const ForwardBatch& batch, KvCache& cache,
                       float* logits) = 0;
};

struct ModelOptions {
  // Activation rows the scratch buffers are sized for up front (grown if ever exceeded).
  int64_t max_num_batched_tokens = 2048;
  WeightOptions weights;  // load-time quantization
  // This process's rank of a tensor-parallel group: the model loads and computes its shard
  // (docs/parallel.md). The default is one process holding everything.
  TensorParallel tensor_parallel;
  // This process's pipeline stage: the model loads, caches and runs only that stage's layers
  // (docs/parallel.md). The default is one stage holding every layer.
  PipelineParallel pipeline_parallel;
};

}  // namespace pagoda
