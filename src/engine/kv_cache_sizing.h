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
KvCachePlan plan_kv_cache(const KvCacheSpec& spec, int32_t block_size, int32_t max_model_len,
                          int32_t max_num_seqs, uint64_t requested_bytes);

// MemAvailable from /proc/meminfo, in bytes (0 if unreadable).
uint64_t available_memory_bytes();

}  // namespace pagoda
