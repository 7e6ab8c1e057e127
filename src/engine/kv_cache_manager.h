// Per-request block tables over the BlockPool: finds cached prefixes, allocates slots for the
// tokens a step will compute (or says no, so the scheduler can preempt), caches blocks once
// they are full and computed, frees finished requests, and forks a prompt's blocks to the other
// samples of an n > 1 request. After vLLM v1's KVCacheManager (vllm/v1/core/kv_cache_manager.py).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/block_pool.h"
#include "engine/request.h"
#include "engine/scheduler_output.h"

namespace pagoda {

struct KvCacheConfig {
  int32_t num_blocks = 0;
  int32_t block_size = 16;  // tokens per block
  bool enable_prefix_caching = true;
};

// A prefix found in the cache: the blocks and the tokens they cover (a multiple of block_size).
struct ComputedBlocks {
  std::vector<int32_t> block_ids;
  int32_t num_tokens = 0;
};

struct PrefixCacheStats {
  int64_t num_query_tokens = 0;  // prompt tokens of admitted requests (caching on)
  int64_t num_hit_tokens = 0;    // of those, served from the cache
  double hit_rate() const {
    return num_query_tokens == 0
               ? 0.0
               : static_cast<double>(num_hit_tokens) / static_cast<double>(num_query_tokens);
  }
};

struct KvSlotUsage {
  int64_t num_allocated_slots = 0;  // distinct referenced blocks * block_size
  int64_t num_used_slots = 0;       // token slots in them holding computed KV
  double waste_percent() const {
    return num_allocated_slots == 0
               ? 0.0
               : 100.0 * static_cast<double>(num_allocated_slots - num_used_slots) /
                     static_cast<double>(num_allocated_slots);
  }
};

class KvCacheManager {
 public:
  explicit KvCacheManager(const KvCacheConfig& config);

  int32_t block_size() const { return config_.block_size; }
  int32_t num_blocks() const { return config_.num_blocks; }
  bool prefix_caching_enabled() const { return config_.enable_prefix_caching; }
  int32_t num_free_blocks() const { return pool_.num_free_blocks(); }
  double usage() const { return pool_.usage(); }
  const PrefixCacheStats& prefix_cache_stats() const { return stats_; }
  const BlockPool& block_pool() const { return pool_; }

  // The longest cached prefix of full blocks of the request's tokens. Never the whole sequence:
  // at least one token is left to compute, so the step produces logits to sample from.
  // Empty for a request with prompt_logprobs (its prompt rows need logits). Changes nothing;
  // pass the result to allocate_slots to take the blocks.
  ComputedBlocks get_computed_blocks(const Request& request);

  // Makes room for `num_new_tokens` more tokens after request.num_computed_tokens (plus, for a
  // request being admitted, the cached prefix `new_computed`, which must come from
  // get_computed_blocks in the same step). Returns false, allocating nothing, if the pool lacks
  // free blocks. Admissions (new_computed != nullptr) count toward the prefix-cache stats.
  // `num_lookahead_tokens` more slots are allocated past them (a draft model writes its drafts'
  // KV there before the target schedules them).
  bool allocate_slots(const Request& request, int32_t num_new_tokens,
                      const ComputedBlocks* new_computed = nullptr,
                      int32_t num_lookahead_tokens = 0);

  // Registers the hashes of the request's blocks that are now full and computed (all tokens
  // before request.num_computed_tokens), so later requests can reuse them. Idempotent; call
  // after each executed step.
  void cache_computed_blocks(const Request& request);

  // Shares the leader's blocks holding prompt positions [0, last_block_start) with `sample`
  // and gives it a private copy of the block holding the last prompt token (copy-on-write: the
  // sample rewrites that token to get its own logits, and then appends its own tokens there).
  // The model runner must perform the returned copy before the step's forward pass. The sample
  // then has num_computed_tokens = num_prompt_tokens - 1 (set by the caller). Returns false if
  // the leader's prompt is not computed yet or no block is free; nothing changes then.
  bool fork(const Request& leader, const Request& sample, BlockCopy& copy);

  // Returns the request's blocks to the pool, last block first, so the tail of a sequence is
  // evicted before its (more shareable) head. Unknown ids are ignored.
  void free(const Request& request);

  // The request's block table (empty if it holds none). Valid until its next allocation/free.
  std::span<const int32_t> block_table(const std::string& request_id) const;

  // KV memory held vs. filled over the given live requests: each distinct block counts once,
  // filled up to the furthest computed token of any holder. allocated - used is the waste
  // (the unfilled tail of each sequence's last block).
  KvSlotUsage slot_usage(std::span<const Request* const> requests) const;

 private:
  struct RequestBlocks {
    std::vector<int32_t> block_ids;
    std::vector<BlockHash> block_hashes;  // of the request's full blocks, grown lazily
    int32_t num_cached_blocks = 0;        // prefix of block_ids registered in the pool's map
  };

  KvCacheConfig config_;
  BlockPool pool_;
  std::unordered_map<std::string, RequestBlocks> requests_;
  PrefixCacheStats stats_;
  std::vector<BlockHash> scratch_hashes_;
};

}  // namespace pagoda
