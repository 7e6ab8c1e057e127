// The pool of KV cache block ids: reference counts, the LRU free queue and the prefix-cache map
// from block hash to block id. No memory lives here: the model runner owns the KV tensors,
// sized by num_blocks, and indexes them with these ids.
//
// Design after vLLM v1 (vllm/v1/core/block_pool.py, kv_cache_utils.py), written anew:
// - A free block may still hold a cached prefix. Free blocks sit in one doubly linked queue,
//   least recently freed at the head; fresh blocks are taken from the head, so the cached block
//   evicted is always the least recently freed one.
// - A prefix-cache hit on a free block takes it out of the middle of the queue in O(1).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace pagoda {

// 128 bits of SHA-256(parent hash || token ids). SHA-256 rather than a fast non-cryptographic
// hash because a collision would silently serve one request another request's KV (a cross-user
// leak if crafted; vLLM moved to SHA-256 for the same reason). With 2^40 cached blocks the
// chance of any collision among 128-bit values is about 2^-49.
struct BlockHash {
  uint64_t hi = 0;
  uint64_t lo = 0;
  friend bool operator==(const BlockHash&, const BlockHash&) = default;
};

struct BlockHashHasher {
  size_t operator()(const BlockHash& h) const { return static_cast<size_t>(h.lo ^ (h.hi * 31)); }
};

// The chain: a block's hash covers its parent's hash and its own tokens, so equal hashes mean
// equal whole prefixes. The first block's parent is kRootBlockHash (all zero).
inline constexpr BlockHash kRootBlockHash{};
BlockHash hash_block_tokens(const BlockHash& parent, std::span<const int32_t> token_ids);

// Appends the hashes of the full blocks of `token_ids` that `hashes` does not cover yet.
void extend_block_hashes(std::span<const int32_t> token_ids, int32_t block_size,
                         std::vector<BlockHash>& hashes);

class BlockPool {
 public:
  BlockPool(int32_t num_blocks, bool enable_caching);

  int32_t num_blocks() const { return num_blocks_; }
  int32_t num_free_blocks() const { return num_free_; }
  // Fraction of blocks in use (referenced by a request), 0..1.
  double usage() const;

  // Takes `count` blocks from the head of the free queue with ref count 1; evicts their cached
  // hashes. Returns false and takes nothing if fewer are free.
  bool get_new_blocks(int32_t count, std::vector<int32_t>& out);

  // The block holding this prefix, if cached (referenced or free).
  std::optional<int32_t> get_cached_block(const BlockHash& hash) const;

  // Adds one reference to each block; a free (cached) block leaves the free queue.
  void touch(std::span<const int32_t> block_ids);

  // Drops one reference from each, in the order given; blocks reaching 0 go to the tail of the
  // free queue (keeping their hash), so the first given is evicted first.
  void free_blocks(std::span<const int32_t> block_ids);

  // Records that `block_id` (full, computed) holds the prefix `hash`. If another block already
  // holds the same prefix, the map keeps that one and this block stays uncached.
  void cache_full_block(int32_t block_id, const BlockHash& hash);

  // Drops every cached hash (for tests and a future /reset_prefix_cache). Returns false if some
  // block is still referenced, in which case nothing changes.
  bool reset_prefix_cache();

  int32_t ref_count(int32_t block_id) const { return blocks_[check(block_id)].ref_count; }
  bool is_cached(int32_t block_id) const { return blocks_[check(block_id)].hash.has_value(); }
  int32_t num_cached_blocks() const { return static_cast<int32_t>(cached_.size()); }
  // Free block ids from head (next evicted) to tail, for tests and debugging.
  std::vector<int32_t> free_queue_order() const;

 private:
  struct Block {
    int32_t ref_count = 0;
    std::optional<BlockHash> hash;
    int32_t prev = -1;  // free-queue links; -1 at the ends or when not queued
    int32_t next = -1;
    bool queued = false;
  };

  size_t check(int32_t block_id) const;
  void push_back_free(int32_t block_id);
  void remove_free(int32_t block_id);
  void evict_hash(int32_t block_id);

  int32_t num_blocks_;
  bool enable_caching_;
  std::vector<Block> blocks_;
  int32_t head_ = -1;  // least recently freed
  int32_t tail_ = -1;  // most recently freed
  int32_t num_free_ = 0;
  std::unordered_map<BlockHash, int32_t, BlockHashHasher> cached_;
};

}  // namespace pagoda
