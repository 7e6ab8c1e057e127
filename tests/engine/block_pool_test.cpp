// BlockPool: allocation, exhaustion, free, LRU eviction order, ref counts, block hash chain.
#include "engine/block_pool.h"

#include <gtest/gtest.h>

#include <numeric>
#include <set>
#include <vector>

#include "util/error.h"

namespace pagoda {
namespace {

std::vector<int32_t> iota_tokens(int32_t n, int32_t start = 0) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(BlockHash, SamePrefixSameHashesAndDivergenceCarriesForward) {
  const int32_t block_size = 4;
  std::vector<int32_t> a = iota_tokens(20);
  std::vector<int32_t> b = a;
  b[9] = 999;  // inside block 2
  std::vector<BlockHash> ha, hb;
  extend_block_hashes(a, block_size, ha);
  extend_block_hashes(b, block_size, hb);
  ASSERT_EQ(ha.size(), 5u);
  ASSERT_EQ(hb.size(), 5u);
  EXPECT_EQ(ha[0], hb[0]);
  EXPECT_EQ(ha[1], hb[1]);
  // Block 2 differs, and so does every later block even though their tokens are equal.
  for (size_t i = 2; i < 5; ++i) EXPECT_NE(ha[i], hb[i]) << "block " << i;

  // Same tokens at a different place in the chain hash differently.
  EXPECT_NE(hash_block_tokens(kRootBlockHash, std::vector<int32_t>{12, 13, 14, 15}), ha[3]);
  // Deterministic, and extending an existing list only appends.
  std::vector<BlockHash> partial;
  extend_block_hashes(std::span<const int32_t>(a).first(9), block_size, partial);
  ASSERT_EQ(partial.size(), 2u);
  extend_block_hashes(a, block_size, partial);
  EXPECT_EQ(partial, ha);
}

TEST(BlockHash, ManyDistinctBlocksNoCollision) {
  std::set<std::pair<uint64_t, uint64_t>> seen;
  BlockHash parent = kRootBlockHash;
  for (int32_t i = 0; i < 20000; ++i) {
    const std::vector<int32_t> tokens{i, i + 1, i * 7, -i};
    const BlockHash h = hash_block_tokens(parent, tokens);
    EXPECT_TRUE(seen.insert({h.hi, h.lo}).second) << "collision at " << i;
    if (i % 3 == 0) parent = h;
  }
}

TEST(BlockPool, AllocatesInIdOrderAndReportsExhaustion) {
  BlockPool pool(4, true);
  EXPECT_EQ(pool.num_free_blocks(), 4);
  std::vector<int32_t> got;
  ASSERT_TRUE(pool.get_new_blocks(3, got));
  EXPECT_EQ(got, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(pool.num_free_blocks(), 1);
  EXPECT_DOUBLE_EQ(pool.usage(), 0.75);
  for (int32_t id : got) EXPECT_EQ(pool.ref_count(id), 1);
  // Not enough: nothing taken.
  std::vector<int32_t> more;
  EXPECT_FALSE(pool.get_new_blocks(2, more));
  EXPECT_TRUE(more.empty());
  EXPECT_EQ(pool.num_free_blocks(), 1);
  ASSERT_TRUE(pool.get_new_blocks(1, more));
  EXPECT_EQ(pool.num_free_blocks(), 0);
  pool.free_blocks(got);
  pool.free_blocks(more);
  EXPECT_EQ(pool.num_free_blocks(), 4);
  EXPECT_DOUBLE_EQ(pool.usage(), 0.0);
}

TEST(BlockPool, FreedBlocksQueueAtTailInGivenOrder) {
  BlockPool pool(5, true);
  std::vector<int32_t> got;
  ASSERT_TRUE(pool.get_new_blocks(5, got));
  pool.free_blocks(std::vector<int32_t>{3, 1});
  pool.free_blocks(std::vector<int32_t>{4, 0, 2});
  EXPECT_EQ(pool.free_queue_order(), (std::vector<int32_t>{3, 1, 4, 0, 2}));
  std::vector<int32_t> again;
  ASSERT_TRUE(pool.get_new_blocks(2, again));
  EXPECT_EQ(again, (std::vector<int32_t>{3, 1}));
}

TEST(BlockPool, EvictsLeastRecentlyFreedCachedBlockFirst) {
  BlockPool pool(3, true);
  std::vector<int32_t> got;
  ASSERT_TRUE(pool.get_new_blocks(3, got));
  const BlockHash h0 = hash_block_tokens(kRootBlockHash, std::vector<int32_t>{1});
  const BlockHash h1 = hash_block_tokens(h0, std::vector<int32_t>{2});
  const BlockHash h2 = hash_block_tokens(h1, std::vector<int32_t>{3});
  pool.cache_full_block(0, h0);
  pool.cache_full_block(1, h1);
  pool.cache_full_block(2, h2);
  pool.free_blocks(std::vector<int32_t>{2});  // freed first: evicted first
  pool.free_blocks(std::vector<int32_t>{0});
  pool.free_blocks(std::vector<int32_t>{1});
  EXPECT_EQ(pool.num_cached_blocks(), 3);
  EXPECT_EQ(pool.get_cached_block(h0), 0);

  std::vector<int32_t> fresh;
  ASSERT_TRUE(pool.get_new_blocks(1, fresh));
  EXPECT_EQ(fresh, std::vector<int32_t>{2});
  EXPECT_FALSE(pool.get_cached_block(h2).has_value());
  EXPECT_FALSE(pool.is_cached(2));
  EXPECT_EQ(pool.get_cached_block(h0), 0);
  EXPECT_EQ(pool.get_cached_block(h1), 1);

  // A hit on a free cached block takes it out of the middle of the queue...
  pool.touch(std::vector<int32_t>{0});
  EXPECT_EQ(pool.ref_count(0), 1);
  EXPECT_EQ(pool.free_queue_order(), std::vector<int32_t>{1});
  // ...and freeing it again puts it at the tail: now the most recently used.
  pool.free_blocks(std::vector<int32_t>{0});
  EXPECT_EQ(pool.free_queue_order(), (std::vector<int32_t>{1, 0}));
  ASSERT_TRUE(pool.get_new_blocks(1, fresh));
  EXPECT_EQ(fresh.back(), 1);
  EXPECT_FALSE(pool.get_cached_block(h1).has_value());
  EXPECT_EQ(pool.get_cached_block(h0), 0);
}

TEST(BlockPool, SharedBlocksCountReferencesAndNeverGoNegative) {
  BlockPool pool(2, true);
  std::vector<int32_t> got;
  ASSERT_TRUE(pool.get_new_blocks(1, got));
  pool.touch(got);  // a second holder
  EXPECT_EQ(pool.ref_count(0), 2);
  pool.free_blocks(got);
  EXPECT_EQ(pool.ref_count(0), 1);
  EXPECT_EQ(pool.num_free_blocks(), 1);  // still held by one
  pool.free_blocks(got);
  EXPECT_EQ(pool.ref_count(0), 0);
  EXPECT_EQ(pool.num_free_blocks(), 2);
#ifdef NDEBUG
  EXPECT_THROW(pool.free_blocks(got), Error);
#else
  EXPECT_DEATH(pool.free_blocks(got), "no references");
#endif
  EXPECT_EQ(pool.ref_count(0), 0);
  EXPECT_EQ(pool.num_free_blocks(), 2);
}

TEST(BlockPool, DuplicateContentKeepsFirstCachedBlock) {
  BlockPool pool(2, true);
  std::vector<int32_t> got;
  ASSERT_TRUE(pool.get_new_blocks(2, got));
  const BlockHash h = hash_block_tokens(kRootBlockHash, std::vector<int32_t>{7, 7});
  pool.cache_full_block(0, h);
  pool.cache_full_block(1, h);
  EXPECT_EQ(pool.get_cached_block(h), 0);
  EXPECT_FALSE(pool.is_cached(1));
  // Evicting the uncached twin must not drop the map entry of the cached one.
  pool.free_blocks(std::vector<int32_t>{1, 0});
  std::vector<int32_t> fresh;
  ASSERT_TRUE(pool.get_new_blocks(1, fresh));
  EXPECT_EQ(fresh, std::vector<int32_t>{1});
  EXPECT_EQ(pool.get_cached_block(h), 0);
}

TEST(BlockPool, CachingOffNeverHits) {
  BlockPool pool(2, false);
  std::vector<int32_t> got;
  ASSERT_TRUE(pool.get_new_blocks(1, got));
  const BlockHash h = hash_block_tokens(kRootBlockHash, std::vector<int32_t>{1});
  pool.cache_full_block(0, h);
  EXPECT_FALSE(pool.get_cached_block(h).has_value());
  EXPECT_EQ(pool.num_cached_blocks(), 0);
}

TEST(BlockPool, ResetPrefixCacheOnlyWhenAllFree) {
  BlockPool pool(2, true);
  std::vector<int32_t> got;
  ASSERT_TRUE(pool.get_new_blocks(1, got));
  const BlockHash h = hash_block_tokens(kRootBlockHash, std::vector<int32_t>{1});
  pool.cache_full_block(0, h);
  EXPECT_FALSE(pool.reset_prefix_cache());
  EXPECT_EQ(pool.get_cached_block(h), 0);
  pool.free_blocks(got);
  EXPECT_TRUE(pool.reset_prefix_cache());
  EXPECT_FALSE(pool.get_cached_block(h).has_value());
}

}  // namespace
}  // namespace pagoda
