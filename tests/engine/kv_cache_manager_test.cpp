// KvCacheManager: prefix lookup, allocate_slots (success, exhaustion allocates nothing), caching
// after compute, free order, n > 1 fork with copy-on-write, slot usage.
#include "engine/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace pagoda {
namespace {

Request make_request(const std::string& id, int32_t num_tokens, int32_t first = 0) {
  std::vector<int32_t> tokens(static_cast<size_t>(num_tokens));
  std::iota(tokens.begin(), tokens.end(), first);
  return Request(id, tokens);
}

std::vector<int32_t> to_vector(std::span<const int32_t> s) {
  return {s.begin(), s.end()};
}

// Admits the request the way the scheduler does and marks `num_new` more tokens computed.
void admit_and_compute(KvCacheManager& kv, Request& r, int32_t num_new) {
  ComputedBlocks computed = kv.get_computed_blocks(r);
  ASSERT_TRUE(kv.allocate_slots(r, num_new, &computed));
  r.num_computed_tokens = computed.num_tokens + num_new;
  kv.cache_computed_blocks(r);
}

TEST(KvCacheManager, AllocatesBlocksForTokens) {
  KvCacheManager kv({.num_blocks = 10, .block_size = 4, .enable_prefix_caching = true});
  Request r = make_request("a", 9);
  ComputedBlocks none = kv.get_computed_blocks(r);
  EXPECT_EQ(none.num_tokens, 0);
  ASSERT_TRUE(kv.allocate_slots(r, 9, &none));
  EXPECT_EQ(to_vector(kv.block_table("a")), (std::vector<int32_t>{0, 1, 2}));
  r.num_computed_tokens = 9;
  // Decoding within the last block's free slots needs no new block.
  r.append_output_token(100);
  ASSERT_TRUE(kv.allocate_slots(r, 1));
  EXPECT_EQ(kv.block_table("a").size(), 3u);
  r.num_computed_tokens = 10;
  for (int i = 0; i < 2; ++i) {
    r.append_output_token(101 + i);
    ASSERT_TRUE(kv.allocate_slots(r, 1));
    r.num_computed_tokens += 1;
  }
  EXPECT_EQ(kv.block_table("a").size(), 3u);  // 12 tokens fill 3 blocks
  r.append_output_token(103);
  ASSERT_TRUE(kv.allocate_slots(r, 1));
  EXPECT_EQ(kv.block_table("a").size(), 4u);
  EXPECT_EQ(kv.num_free_blocks(), 6);
  EXPECT_DOUBLE_EQ(kv.usage(), 0.4);
}

TEST(KvCacheManager, ExhaustionAllocatesNothing) {
  KvCacheManager kv({.num_blocks = 3, .block_size = 4, .enable_prefix_caching = false});
  Request a = make_request("a", 8);
  Request b = make_request("b", 8, 50);
  ComputedBlocks none;
  ASSERT_TRUE(kv.allocate_slots(a, 8, &none));
  EXPECT_FALSE(kv.allocate_slots(b, 8, &none));
  EXPECT_TRUE(kv.block_table("b").empty());
  EXPECT_EQ(kv.num_free_blocks(), 1);
  ASSERT_TRUE(kv.allocate_slots(b, 4, &none));  // a chunk that fits
  EXPECT_EQ(kv.num_free_blocks(), 0);
  kv.free(a);
  kv.free(b);
  EXPECT_EQ(kv.num_free_blocks(), 3);
  EXPECT_TRUE(kv.block_table("a").empty());
}

TEST(KvCacheManager, FreeReturnsBlocksTailFirst) {
  KvCacheManager kv({.num_blocks = 4, .block_size = 2, .enable_prefix_caching = true});
  Request a = make_request("a", 7);
  admit_and_compute(kv, a, 7);
  EXPECT_EQ(to_vector(kv.block_table("a")), (std::vector<int32_t>{0, 1, 2, 3}));
  kv.free(a);
  // The sequence's tail is evicted first; its head (most shareable) last.
  EXPECT_EQ(kv.block_pool().free_queue_order(), (std::vector<int32_t>{3, 2, 1, 0}));
}

TEST(KvCacheManager, ReusesLongestCachedPrefixButNeverTheWholeSequence) {
  KvCacheManager kv({.num_blocks = 20, .block_size = 4, .enable_prefix_caching = true});
  Request a = make_request("a", 16);
  admit_and_compute(kv, a, 16);
  const std::vector<int32_t> table_a = to_vector(kv.block_table("a"));

  // Same 16 tokens: 4 full cached blocks, but the last token must be recomputed -> 3 blocks hit.
  Request same = make_request("same", 16);
  ComputedBlocks hit = kv.get_computed_blocks(same);
  EXPECT_EQ(hit.num_tokens, 12);
  EXPECT_EQ(hit.block_ids, std::vector<int32_t>(table_a.begin(), table_a.begin() + 3));

  // Diverges inside block 2: only blocks 0 and 1 hit.
  std::vector<int32_t> tokens(a.all_token_ids());
  tokens[9] = 777;
  tokens.push_back(5);
  Request diverge("diverge", tokens);
  ComputedBlocks hit2 = kv.get_computed_blocks(diverge);
  EXPECT_EQ(hit2.num_tokens, 8);
  ASSERT_TRUE(kv.allocate_slots(diverge, diverge.num_tokens() - 8, &hit2));
  const auto table = to_vector(kv.block_table("diverge"));
  ASSERT_EQ(table.size(), 5u);
  EXPECT_EQ(table[0], table_a[0]);
  EXPECT_EQ(table[1], table_a[1]);
  EXPECT_NE(table[2], table_a[2]);
  EXPECT_EQ(kv.block_pool().ref_count(table_a[0]), 2);
  EXPECT_EQ(kv.prefix_cache_stats().num_query_tokens, 16 + 17);
  EXPECT_EQ(kv.prefix_cache_stats().num_hit_tokens, 0 + 8);
}

TEST(KvCacheManager, PromptLogprobsRequestTakesNoCachedPrefix) {
  KvCacheManager kv({.num_blocks = 20, .block_size = 4, .enable_prefix_caching = true});
  Request a = make_request("a", 16);
  admit_and_compute(kv, a, 16);
  Request plain = make_request("plain", 16);
  EXPECT_EQ(kv.get_computed_blocks(plain).num_tokens, 12);
  // A cached prefix has no logits, so a request that needs them computes the whole prompt.
  Request with = make_request("with", 16);
  with.sampling_params.prompt_logprobs = 0;
  EXPECT_EQ(kv.get_computed_blocks(with).num_tokens, 0);
  // Admitted, it holds fresh blocks: a's stay unshared.
  admit_and_compute(kv, with, 16);
  EXPECT_EQ(kv.block_pool().ref_count(to_vector(kv.block_table("a"))[0]), 1);
  EXPECT_NE(to_vector(kv.block_table("with"))[0], to_vector(kv.block_table("a"))[0]);
}

TEST(KvCacheManager, HitOnFreedCachedBlocksAfterOwnerFinished) {
  KvCacheManager kv({.num_blocks = 6, .block_size = 4, .enable_prefix_caching = true});
  Request a = make_request("a", 13);
  admit_and_compute(kv, a, 13);  // 4 blocks, 3 full and cached
  kv.free(a);
  EXPECT_EQ(kv.num_free_blocks(), 6);
  Request b = make_request("b", 14);
  ComputedBlocks hit = kv.get_computed_blocks(b);
  EXPECT_EQ(hit.num_tokens, 12);
  // Needs 4 blocks: 3 cached (free now) + 1 new; 6 free minus 3 evictable hits = 3 >= 1.
  ASSERT_TRUE(kv.allocate_slots(b, 2, &hit));
  EXPECT_EQ(kv.num_free_blocks(), 2);
}

TEST(KvCacheManager, CountsCachedFreeBlocksWhenCheckingRoom) {
  KvCacheManager kv({.num_blocks = 4, .block_size = 4, .enable_prefix_caching = true});
  Request a = make_request("a", 12);
  admit_and_compute(kv, a, 12);  // blocks 0,1,2 full and cached
  kv.free(a);
  // 2 cached blocks hit (leaving the last token), then 1 more block: free 4 - 2 hits = 2 >= 1.
  Request b = make_request("b", 12);
  ComputedBlocks hit = kv.get_computed_blocks(b);
  EXPECT_EQ(hit.num_tokens, 8);
  // Ask for more than fits: 8 + 12 tokens = 5 blocks, 2 hit, 3 new > 4 - 2 free.
  EXPECT_FALSE(kv.allocate_slots(b, 12, &hit));
  EXPECT_EQ(kv.num_free_blocks(), 4);
  EXPECT_EQ(kv.block_pool().ref_count(hit.block_ids[0]), 0);
  EXPECT_TRUE(kv.allocate_slots(b, 4, &hit));
}

TEST(KvCacheManager, BlocksAreCachedOnlyOnceComputed) {
  KvCacheManager kv({.num_blocks = 8, .block_size = 4, .enable_prefix_caching = true});
  Request a = make_request("a", 12);
  ComputedBlocks none = kv.get_computed_blocks(a);
  ASSERT_TRUE(kv.allocate_slots(a, 12, &none));
  Request b = make_request("b", 12);
  // Allocated but not computed yet: nothing to reuse.
  EXPECT_EQ(kv.get_computed_blocks(b).num_tokens, 0);
  a.num_computed_tokens = 6;  // a chunk of 6 computed: block 0 is full
  kv.cache_computed_blocks(a);
  EXPECT_EQ(kv.get_computed_blocks(b).num_tokens, 4);
  a.num_computed_tokens = 12;
  kv.cache_computed_blocks(a);
  EXPECT_EQ(kv.get_computed_blocks(b).num_tokens, 8);
}

TEST(KvCacheManager, PrefixCachingOffNeverHits) {
  KvCacheManager kv({.num_blocks = 8, .block_size = 4, .enable_prefix_caching = false});
  Request a = make_request("a", 12);
  admit_and_compute(kv, a, 12);
  Request b = make_request("b", 12);
  EXPECT_EQ(kv.get_computed_blocks(b).num_tokens, 0);
  EXPECT_EQ(kv.prefix_cache_stats().num_query_tokens, 0);
}

TEST(KvCacheManager, ForkSharesFullPromptBlocksAndCopiesTheLastOne) {
  for (bool caching : {true, false}) {
    KvCacheManager kv({.num_blocks = 10, .block_size = 4, .enable_prefix_caching = caching});
    Request leader = make_request("x#0", 10);  // blocks: [0..3] [4..7] [8,9]
    admit_and_compute(kv, leader, 10);
    Request sample = make_request("x#1", 10);
    BlockCopy copy;
    Request early = make_request("x#2", 10);
    leader.num_computed_tokens = 9;  // prompt not finished: no fork
    EXPECT_FALSE(kv.fork(leader, early, copy));
    leader.num_computed_tokens = 10;

    ASSERT_TRUE(kv.fork(leader, sample, copy));
    const auto lt = to_vector(kv.block_table("x#0"));
    const auto st = to_vector(kv.block_table("x#1"));
    ASSERT_EQ(st.size(), 3u);
    EXPECT_EQ(st[0], lt[0]);
    EXPECT_EQ(st[1], lt[1]);
    EXPECT_NE(st[2], lt[2]);
    EXPECT_EQ(copy, (BlockCopy{lt[2], st[2]}));
    EXPECT_EQ(kv.block_pool().ref_count(lt[0]), 2);
    EXPECT_EQ(kv.block_pool().ref_count(lt[2]), 1);
    // The sample recomputes the last prompt token: no new block needed for it.
    sample.num_computed_tokens = 9;
    ASSERT_TRUE(kv.allocate_slots(sample, 1));
    EXPECT_EQ(kv.block_table("x#1").size(), 3u);
    kv.free(leader);
    EXPECT_EQ(kv.block_pool().ref_count(lt[0]), 1);
    kv.free(sample);
    EXPECT_EQ(kv.num_free_blocks(), 10);
  }
}

TEST(KvCacheManager, ForkOfBlockAlignedPromptCopiesTheFullLastBlock) {
  KvCacheManager kv({.num_blocks = 10, .block_size = 4, .enable_prefix_caching = true});
  Request leader = make_request("y#0", 8);
  admit_and_compute(kv, leader, 8);
  Request sample = make_request("y#1", 8);
  BlockCopy copy;
  ASSERT_TRUE(kv.fork(leader, sample, copy));
  const auto lt = to_vector(kv.block_table("y#0"));
  const auto st = to_vector(kv.block_table("y#1"));
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[0], lt[0]);
  EXPECT_EQ(copy.src_block_id, lt[1]);  // the sample writes position 7 into its own copy
  EXPECT_EQ(copy.dst_block_id, st[1]);
}

TEST(KvCacheManager, SlotUsageCountsSharedBlocksOnce) {
  KvCacheManager kv({.num_blocks = 10, .block_size = 4, .enable_prefix_caching = true});
  Request leader = make_request("z#0", 10);
  admit_and_compute(kv, leader, 10);
  KvSlotUsage one = kv.slot_usage(std::vector<const Request*>{&leader});
  EXPECT_EQ(one.num_allocated_slots, 12);
  EXPECT_EQ(one.num_used_slots, 10);
  EXPECT_NEAR(one.waste_percent(), 100.0 * 2 / 12, 1e-9);
  Request sample = make_request("z#1", 10);
  BlockCopy copy;
  ASSERT_TRUE(kv.fork(leader, sample, copy));
  sample.num_computed_tokens = 10;
  KvSlotUsage two = kv.slot_usage(std::vector<const Request*>{&leader, &sample});
  EXPECT_EQ(two.num_allocated_slots, 16);  // 2 shared + 1 + 1 private
  EXPECT_EQ(two.num_used_slots, 4 + 4 + 2 + 2);
}

}  // namespace
}  // namespace pagoda
