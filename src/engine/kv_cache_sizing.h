// How big the KV pool is: from --kv-cache-space, or by default a quarter of the memory that is
// available now, capped at what max_num_seqs full-length sequences could ever use.
#pragma once

#include <cstdint>

#include "model/kv_cache.h"

namespace pagoda {

struct KvCachePlan {
  int32_t num_blocks = 0;
  int64_t num_bytes = 0;
};

// Throws pagoda::Error when the pool cannot hold one max_model_len sequence, saying what to
// change.
// `extra_bytes_per_token`: a second cache with a block for each of this one's (a draft model's),
// sharing the budget.
KvCachePlan plan_kv_cache(const KvCacheSpec& spec, int32_t block_size, int32_t max_model_len,
                          int32_t max_num_seqs, uint64_t requested_bytes,
                          int64_t extra_bytes_per_token = 0);

// MemAvailable from /proc/meminfo, in bytes (0 if unreadable).
uint64_t available_memory_bytes();

}  // namespace pagoda
