#include "engine/kv_cache_sizing.h"

#include <algorithm>
#include <fstream>
#include <string>

#include "util/error.h"
#include "util/units.h"

namespace pagoda {

uint64_t available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t value = 0;
  std::string unit;
  while (in >> key >> value >> unit) {
    if (key == "MemAvailable:") return value * 1024;
  }
  return 0;
}

KvCachePlan plan_kv_cache(const KvCacheSpec& spec, int32_t block_size, int32_t max_model_len,
                          int32_t max_num_seqs, uint64_t requested_bytes,
                          int64_t extra_bytes_per_token) {
  const int64_t bytes_per_token = spec.bytes_per_token() + extra_bytes_per_token;
  const int64_t block_bytes = bytes_per_token * block_size;
  const int64_t blocks_per_seq = (max_model_len + block_size - 1) / block_size;
  int64_t bytes = static_cast<int64_t>(requested_bytes);
  if (bytes == 0) {
    // Default: a quarter of what is available, never more than every sequence at full length
    // could use, never less than one full-length sequence.
    const int64_t most_useful = block_bytes * blocks_per_seq * max_num_seqs;
    const int64_t quarter = static_cast<int64_t>(available_memory_bytes() / 4);
    bytes = std::max(std::min(quarter, most_useful), block_bytes * blocks_per_seq);
  }
  KvCachePlan plan;
  plan.num_blocks = static_cast<int32_t>(std::min<int64_t>(bytes / block_bytes, INT32_MAX));
  plan.num_bytes = plan.num_blocks * block_bytes;
  if (plan.num_blocks < blocks_per_seq) {
    fail(
        "--kv-cache-space {} holds {} blocks of {} tokens, but one {}-token sequence needs {} ({} "
        "per "
        "token); raise --kv-cache-space or lower --max-model-len",
        format_bytes(static_cast<uint64_t>(bytes)), plan.num_blocks, block_size, max_model_len,
        blocks_per_seq, format_bytes(static_cast<uint64_t>(bytes_per_token)));
  }
  return plan;
}

}  // namespace pagoda
