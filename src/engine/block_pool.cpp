// BlockPool: ref counts, the intrusive LRU free queue and the prefix-cache map; block hashing.
#include "engine/block_pool.h"

#include <nettle/sha2.h>

#include <cassert>
#include <cstring>

#include "util/error.h"

namespace pagoda {

namespace {

uint64_t load_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void store_u64_le(uint64_t v, uint8_t* p) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

}  // namespace

BlockHash hash_block_tokens(const BlockHash& parent, std::span<const int32_t> token_ids) {
  // Serialised explicitly little-endian so hashes do not depend on the host's byte order.
  sha256_ctx ctx;
  sha256_init(&ctx);
  uint8_t parent_bytes[16];
  store_u64_le(parent.hi, parent_bytes);
  store_u64_le(parent.lo, parent_bytes + 8);
  sha256_update(&ctx, sizeof(parent_bytes), parent_bytes);
  uint8_t buffer[256];
  size_t used = 0;
  for (int32_t token : token_ids) {
    const auto u = static_cast<uint32_t>(token);
    for (int i = 0; i < 4; ++i) buffer[used++] = static_cast<uint8_t>(u >> (8 * i));
    if (used == sizeof(buffer)) {
      sha256_update(&ctx, used, buffer);
      used = 0;
    }
  }
  if (used > 0) sha256_update(&ctx, used, buffer);
  uint8_t digest[SHA256_DIGEST_SIZE];
  sha256_digest(&ctx, sizeof(digest), digest);
  return BlockHash{load_u64_le(digest), load_u64_le(digest + 8)};
}

void extend_block_hashes(std::span<const int32_t> token_ids, int32_t block_size,
                         std::vector<BlockHash>& hashes) {
  const size_t num_full = token_ids.size() / static_cast<size_t>(block_size);
  while (hashes.size() < num_full) {
    const BlockHash& parent = hashes.empty() ? kRootBlockHash : hashes.back();
    const auto block = token_ids.subspan(hashes.size() * static_cast<size_t>(block_size),
                                         static_cast<size_t>(block_size));
    hashes.push_back(hash_block_tokens(parent, block));
  }
}

BlockPool::BlockPool(int32_t num_blocks, bool enable_caching)
    : num_blocks_(num_blocks), enable_caching_(enable_caching) {
  if (num_blocks <= 0) fail("BlockPool: num_blocks must be positive, got {}", num_blocks);
  blocks_.resize(static_cast<size_t>(num_blocks));
  // Ids in increasing order, so a fresh pool hands out 0, 1, 2, ...
  for (int32_t id = 0; id < num_blocks; ++id) push_back_free(id);
}

double BlockPool::usage() const {
  return 1.0 - static_cast<double>(num_free_) / static_cast<double>(num_blocks_);
}

size_t BlockPool::check(int32_t block_id) const {
  assert(block_id >= 0 && block_id < num_blocks_);
  return static_cast<size_t>(block_id);
}

void BlockPool::push_back_free(int32_t block_id) {
  Block& b = blocks_[check(block_id)];
  assert(!b.queued && b.ref_count == 0);
  b.prev = tail_;
  b.next = -1;
  if (tail_ >= 0) {
    blocks_[static_cast<size_t>(tail_)].next = block_id;
  } else {
    head_ = block_id;
  }
  tail_ = block_id;
  b.queued = true;
  ++num_free_;
}

void BlockPool::remove_free(int32_t block_id) {
  Block& b = blocks_[check(block_id)];
  assert(b.queued);
  if (b.prev >= 0) {
    blocks_[static_cast<size_t>(b.prev)].next = b.next;
  } else {
    head_ = b.next;
  }
  if (b.next >= 0) {
    blocks_[static_cast<size_t>(b.next)].prev = b.prev;
  } else {
    tail_ = b.prev;
  }
  b.prev = b.next = -1;
  b.queued = false;
  --num_free_;
}

void BlockPool::evict_hash(int32_t block_id) {
  Block& b = blocks_[check(block_id)];
  if (!b.hash) return;
  auto it = cached_.find(*b.hash);
  if (it != cached_.end() && it->second == block_id) cached_.erase(it);
  b.hash.reset();
}

bool BlockPool::get_new_blocks(int32_t count, std::vector<int32_t>& out) {
  assert(count >= 0);
  if (count > num_free_) return false;
  for (int32_t i = 0; i < count; ++i) {
    const int32_t id = head_;
    remove_free(id);
    evict_hash(id);
    blocks_[static_cast<size_t>(id)].ref_count = 1;
    out.push_back(id);
  }
  return true;
}

std::optional<int32_t> BlockPool::get_cached_block(const BlockHash& hash) const {
  if (!enable_caching_) return std::nullopt;
  auto it = cached_.find(hash);
  if (it == cached_.end()) return std::nullopt;
  return it->second;
}

void BlockPool::touch(std::span<const int32_t> block_ids) {
  for (int32_t id : block_ids) {
    Block& b = blocks_[check(id)];
    if (b.ref_count == 0) remove_free(id);
    ++b.ref_count;
  }
}

void BlockPool::free_blocks(std::span<const int32_t> block_ids) {
  for (int32_t id : block_ids) {
    Block& b = blocks_[check(id)];
    // A negative count would mean a double free: two owners think they released the block.
    assert(b.ref_count > 0 && "BlockPool: freeing a block with no references");
    if (b.ref_count <= 0) fail("BlockPool: block {} freed with ref count {}", id, b.ref_count);
    if (--b.ref_count == 0) push_back_free(id);
  }
}

void BlockPool::cache_full_block(int32_t block_id, const BlockHash& hash) {
  if (!enable_caching_) return;
  Block& b = blocks_[check(block_id)];
  if (b.hash) return;  // already cached (its contents never change while referenced)
  if (cached_.contains(hash)) return;
  b.hash = hash;
  cached_.emplace(hash, block_id);
}

bool BlockPool::reset_prefix_cache() {
  if (num_free_ != num_blocks_) return false;
  for (Block& b : blocks_) b.hash.reset();
  cached_.clear();
  return true;
}

std::vector<int32_t> BlockPool::free_queue_order() const {
  std::vector<int32_t> order;
  order.reserve(static_cast<size_t>(num_free_));
  for (int32_t id = head_; id >= 0; id = blocks_[static_cast<size_t>(id)].next) order.push_back(id);
  return order;
}

}  // namespace pagoda
