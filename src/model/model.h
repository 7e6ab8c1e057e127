// The interface every model family implements: one forward pass over a flattened batch,
// reading and writing the paged KV cache. A family is one file plus one registry line.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "device/execution_context.h"
#include "model/forward_batch.h"
#include "model/kv_cache.h"
#include "model/pipeline_parallel.h"
#include "model/tensor_parallel.h"
#include "model/weights.h"
#include "util/error.h"

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

  // Multi-token prediction (DeepSeek-V3's MTP layers; speculative method "mtp",
  // docs/speculative_decoding.md). A model has them only when loaded with
  // ModelOptions::load_mtp_layers from a checkpoint that holds them; they then own the cache
  // layers after the decoder's (kv_cache_spec() counts them).
  virtual int32_t num_mtp_layers() const { return 0; }
  virtual int64_t hidden_size() const { return 0; }  // of hidden_states() rows; 0 without MTP
  // The last forward()'s hidden states [batch.num_tokens(), hidden]: the last decoder layer's
  // output before the final norm. Valid until the next forward or forward_mtp call.
  virtual std::span<const float> hidden_states() const { return {}; }
  // One MTP layer over `batch`, whose row i pairs the token AFTER position positions[i] with
  // previous_hidden row i (the hidden state at that position: the target's, or this layer's own
  // output when drafting recursively). Writes the layer's K/V at the batch's slots, `logits` as
  // forward() does, and the layer's output before its head norm to hidden_out
  // [batch.num_tokens(), hidden].
  virtual void forward_mtp(const ExecutionContext& ctx, const ForwardBatch& batch,
                           const float* previous_hidden, KvCache& cache, float* logits,
                           float* hidden_out) {
    (void)ctx, (void)batch, (void)previous_hidden, (void)cache, (void)logits, (void)hidden_out;
    fail("this model has no multi-token-prediction layers");
  }
};

// See ModelOptions::mla_expanded_min_tokens.
constexpr int32_t kDefaultMlaExpandedMinTokens = 128;

struct ModelOptions {
  // Activation rows the scratch buffers are sized for up front (grown if ever exceeded).
  int64_t max_num_batched_tokens = 2048;
  WeightOptions weights;  // load-time quantization
  // This process's rank of a tensor-parallel group: the model loads and computes its shard
  // (docs/parallel.md). The default is one process holding everything.
  TensorParallel tensor_parallel;
  // Load the checkpoint's multi-token-prediction layers (speculative method "mtp"); without it
  // they are left unread, costing neither memory nor a cache layer.
  bool load_mtp_layers = false;
  // This process's pipeline stage: the model loads, caches and runs only that stage's layers
  // (docs/parallel.md). The default is one stage holding every layer.
  PipelineParallel pipeline_parallel;
  // MLA models (DeepSeek-V2/V3): a sequence with at least this many new tokens in a step attends
  // in the expanded form (its context's K/V decompressed once per step, then multi-head
  // attention tiles); fewer keep the weight-absorbed form over the latent cache. The default is
  // the crossover by flop count at V2-Lite's shape, which `bench_deepseek --prefill` measures
  // (docs/deepseek.md); 1 forces the expanded form for every sequence and INT32_MAX turns it off.
  int32_t mla_expanded_min_tokens = kDefaultMlaExpandedMinTokens;
  // The expanded form's buffers together stay under this many bytes: heads are expanded in
  // groups small enough (all 16 of V2-Lite's at 4k tokens of context; V3's 128 in groups).
  int64_t mla_expanded_scratch_bytes = int64_t{256} << 20;
};

}  // namespace pagoda
