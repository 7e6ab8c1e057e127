// Forward passes through a paged KV cache without the engine, as the model tests and the
// logits drivers (dump_logits, deepseek_dump, tp_forward) run them: the caller hands out each
// sequence's blocks (in whatever order it wants logical and physical blocks to differ in),
// this builds the batch of the sequences' next tokens, runs the model and collects the logits.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/kv_cache.h"
#include "model/model.h"

namespace pagoda::test {

// A sequence's token ids, the cache blocks that hold its K/V, and how many of its tokens the
// cache holds.
struct PagedSequence {
  std::vector<int32_t> ids;
  std::vector<int32_t> block_table;
  int32_t num_computed = 0;
};

// The cache slot of `position` of `s`: its block's id times `block_size` plus its offset.
int64_t cache_slot(const PagedSequence& s, int32_t position, int32_t block_size);

// A KV cache of `num_blocks` blocks in memory of its own.
class OwnedKvCache {
 public:
  OwnedKvCache(const KvCacheSpec& spec, int32_t num_blocks, int32_t block_size);
  OwnedKvCache(const OwnedKvCache&) = delete;
  OwnedKvCache& operator=(const OwnedKvCache&) = delete;

  KvCache& cache() { return cache_; }

 private:
  std::vector<float> memory_;
  KvCache cache_;
};

// (sequence, how many of its next tokens to compute) pairs, in batch order.
using StepWork = std::vector<std::pair<PagedSequence*, int32_t>>;

// One forward over `work` on the host: each sequence's next tokens, its block table already
// covering them, with the logits of its last row wanted. Appends those rows
// ([work.size(), vocab]) to `logits` and counts the tokens as computed.
void forward_step(Model& model, KvCache& cache, const StepWork& work, std::vector<float>& logits);

// "3,17,4" -> {3, 17, 4}: token ids as the drivers take them on their command line.
std::vector<int32_t> parse_token_ids(const std::string& text);

// `logits` into the file `path` as raw fp32, as the drivers hand them to their Python checks.
// Throws pagoda::Error naming the file when it cannot be written.
void write_logits(const std::string& path, const std::vector<float>& logits);

}  // namespace pagoda::test
