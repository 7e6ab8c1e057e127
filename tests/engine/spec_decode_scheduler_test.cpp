// Speculative decoding in the scheduler, with the runner's outputs written by hand: drafts ride
// along with a decode as extra tokens (budget, blocks, max_tokens and max_model_len respected),
// rejected drafts are rolled back before any block is hashed into the prefix cache, and stop
// checks run after every accepted token.
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "engine/scheduler.h"

namespace pagoda {
namespace {

SchedulerConfig config(int32_t num_blocks = 64, int32_t budget = 256) {
  SchedulerConfig c;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = budget;
  c.max_model_len = 128;
  c.block_size = 4;
  c.num_kv_blocks = num_blocks;
  c.enable_prefix_caching = true;
  return c;
}

std::vector<int32_t> iota(int32_t n, int32_t first) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

Request request(const std::string& id, std::vector<int32_t> prompt, int32_t max_tokens = 32) {
  SamplingParams params;
  params.max_tokens = max_tokens;
  params.temperature = 0.0f;
  return Request(id, std::move(prompt), params);
}

// The runner's answer for a one-request step: `token` sampled, `accepted` drafts kept, and
// `drafts` proposed for the next step.
ModelRunnerOutput answer(int32_t token, int32_t accepted, std::vector<int32_t> drafts) {
  ModelRunnerOutput out;
  out.sampled_token_ids = {token};
  out.logprobs.resize(1);
  out.prompt_logprobs.resize(1);
  out.num_accepted_draft_tokens = {accepted};
  out.draft_token_ids = {std::move(drafts)};
  return out;
}

TEST(SpecDecodeScheduler, DraftsAreExtraTokensOfTheDecodeAndRejectedOnesRollBack) {
  Scheduler scheduler(config());
  scheduler.add_request(request("a", iota(20, 100)));
  SchedulerOutput step1 = scheduler.schedule();
  ASSERT_EQ(step1.requests.size(), 1u);
  EXPECT_TRUE(step1.requests[0].draft_token_ids.empty());
  scheduler.update_from_output(step1, answer(7, 0, {8, 9, 10}));

  SchedulerOutput step2 = scheduler.schedule();
  ASSERT_EQ(step2.requests.size(), 1u);
  const ScheduledRequest& s = step2.requests[0];
  EXPECT_EQ(s.start_position, 20);
  EXPECT_EQ(s.num_new_tokens, 4);  // the sampled token and three drafts
  EXPECT_EQ(s.draft_token_ids, (std::vector<int32_t>{8, 9, 10}));
  EXPECT_TRUE(s.sample);
  EXPECT_EQ(step2.total_num_scheduled_tokens, 4);
  // Blocks for positions up to 23 (the last draft): 6 blocks of 4.
  EXPECT_EQ(scheduler.kv_cache_manager().block_table("a").size(), 6u);

  // Draft 8 accepted, 9 rejected in favour of 11: 8 and 11 are the new tokens, and only the
  // KV through 8 stays computed.
  auto outputs = scheduler.update_from_output(step2, answer(11, 1, {12}));
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(outputs[0].new_token_ids, (std::vector<int32_t>{8, 11}));
  const Request* a = scheduler.find_request("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->num_tokens(), 23);
  EXPECT_EQ(a->num_computed_tokens, 22);

  SchedulerOutput step3 = scheduler.schedule();
  ASSERT_EQ(step3.requests.size(), 1u);
  EXPECT_EQ(step3.requests[0].start_position, 22);  // rewrites the rejected draft's slot
  EXPECT_EQ(step3.requests[0].num_new_tokens, 2);
}

TEST(SpecDecodeScheduler, ABlockHoldingRejectedDraftsIsNeverCached) {
  Scheduler scheduler(config());
  const std::vector<int32_t> prompt = iota(7, 100);
  scheduler.add_request(request("a", prompt));
  scheduler.update_from_output(scheduler.schedule(), answer(50, 0, {60, 61, 62, 63}));
  // Positions 7..11 computed with drafts 60..63 at 8..11; all of them rejected.
  SchedulerOutput step2 = scheduler.schedule();
  ASSERT_EQ(step2.requests[0].num_new_tokens, 5);
  scheduler.update_from_output(step2, answer(70, 0, {}));
  scheduler.finish_request("a", RequestStatus::kFinishedAborted);

  // A prompt that continues with the rejected drafts finds the first two blocks (positions
  // 0..7: the prompt and the sampled 50) and not the block the drafts were written to.
  std::vector<int32_t> follower = prompt;
  for (int32_t t : {50, 60, 61, 62, 63, 64}) follower.push_back(t);
  scheduler.add_request(request("b", follower));
  scheduler.schedule();
  const Request* b = scheduler.find_request("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->num_cached_prompt_tokens, 8);

  // The accepted path caches what it computed: 50, 70 follow the prompt in a's output.
  scheduler.finish_request("b", RequestStatus::kFinishedAborted);
  std::vector<int32_t> kept = prompt;
  for (int32_t t : {50, 70, 1, 2, 3}) kept.push_back(t);
  scheduler.add_request(request("c", kept));
  scheduler.schedule();
  EXPECT_EQ(scheduler.find_request("c")->num_cached_prompt_tokens, 8);
}

TEST(SpecDecodeScheduler, BudgetMaxTokensAndMaxModelLenCapTheDrafts) {
  {
    Scheduler scheduler(config(64, 3));  // 3 tokens a step
    scheduler.add_request(request("a", iota(3, 100)));
    scheduler.update_from_output(scheduler.schedule(), answer(7, 0, {1, 2, 3, 4}));
    SchedulerOutput step = scheduler.schedule();
    EXPECT_EQ(step.requests[0].num_new_tokens, 3);
    EXPECT_EQ(step.requests[0].draft_token_ids, (std::vector<int32_t>{1, 2}));
  }
  {
    Scheduler scheduler(config());
    scheduler.add_request(request("a", iota(3, 100), /*max_tokens=*/3));
    scheduler.update_from_output(scheduler.schedule(), answer(7, 0, {1, 2, 3, 4}));
    // One output so far, two to go: one draft plus the token after it.
    SchedulerOutput step = scheduler.schedule();
    EXPECT_EQ(step.requests[0].draft_token_ids, (std::vector<int32_t>{1}));
    auto outputs = scheduler.update_from_output(step, answer(9, 1, {5}));
    ASSERT_EQ(outputs.size(), 1u);
    EXPECT_EQ(outputs[0].new_token_ids, (std::vector<int32_t>{1, 9}));
    EXPECT_EQ(outputs[0].status, RequestStatus::kFinishedLength);
  }
  {
    SchedulerConfig c = config();
    c.max_model_len = 12;
    Scheduler scheduler(c);
    scheduler.add_request(request("a", iota(9, 100)));
    scheduler.update_from_output(scheduler.schedule(), answer(7, 0, {1, 2, 3, 4}));
    // 10 tokens of 12: one draft and the token after it.
    EXPECT_EQ(scheduler.schedule().requests[0].draft_token_ids.size(), 1u);
  }
}

TEST(SpecDecodeScheduler, AStopAmongTheAcceptedDraftsEndsTheOutputThere) {
  Scheduler scheduler(config());
  Request r = request("a", iota(5, 100));
  r.sampling_params.stop_token_ids = {42};
  scheduler.add_request(std::move(r));
  scheduler.update_from_output(scheduler.schedule(), answer(7, 0, {41, 42, 43}));
  SchedulerOutput step = scheduler.schedule();
  auto outputs = scheduler.update_from_output(step, answer(44, 3, {}));
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(outputs[0].new_token_ids, (std::vector<int32_t>{41, 42}));
  EXPECT_EQ(outputs[0].status, RequestStatus::kFinishedStopped);
  EXPECT_EQ(scheduler.find_request("a"), nullptr);
  EXPECT_EQ(scheduler.kv_cache_manager().num_free_blocks(), 64);
}

TEST(SpecDecodeScheduler, PreemptionDropsTheDrafts) {
  // 8 blocks of 4: two requests of 14 tokens fit, their drafts do not.
  SchedulerConfig c = config(8);
  c.max_model_len = 32;
  Scheduler scheduler(c);
  scheduler.add_request(request("a", iota(13, 100), 8));
  scheduler.add_request(request("b", iota(13, 200), 8));
  SchedulerOutput step1 = scheduler.schedule();
  ASSERT_EQ(step1.requests.size(), 2u);
  ModelRunnerOutput out;
  out.sampled_token_ids = {1, 2};
  out.logprobs.resize(2);
  out.prompt_logprobs.resize(2);
  out.num_accepted_draft_tokens = {0, 0};
  out.draft_token_ids = {{3, 4, 5}, {6, 7, 8}};
  scheduler.update_from_output(step1, out);
  SchedulerOutput step2 = scheduler.schedule();
  ASSERT_EQ(step2.preempted_request_ids, (std::vector<std::string>{"b"}));
  ASSERT_EQ(step2.requests.size(), 1u);
  EXPECT_EQ(step2.requests[0].draft_token_ids.size(), 3u);
  EXPECT_TRUE(scheduler.find_request("b")->spec_token_ids.empty());
}

// A draft model writes its drafts' KV past the scheduled tokens: the scheduler allocates
// num_lookahead_tokens slots more, never past max_model_len or the request's last token.
TEST(SpecDecodeScheduler, LookaheadSlotsCoverTheDraftModelsDraftsWithinTheRequestsLength) {
  SchedulerConfig c = config();
  c.num_lookahead_tokens = 4;
  Scheduler scheduler(c);
  scheduler.add_request(request("a", iota(20, 100)));
  SchedulerOutput step1 = scheduler.schedule();
  // 20 prompt tokens and 4 slots of lookahead: 6 blocks of 4.
  EXPECT_EQ(scheduler.kv_cache_manager().block_table("a").size(), 6u);
  scheduler.update_from_output(step1, answer(7, 0, {8, 9, 10}));
  SchedulerOutput step2 = scheduler.schedule();
  ASSERT_EQ(step2.requests[0].num_new_tokens, 4);
  // Positions 20..23 scheduled, 24..27 lookahead: 7 blocks.
  EXPECT_EQ(scheduler.kv_cache_manager().block_table("a").size(), 7u);

  // 126 prompt tokens of max_model_len 128: the lookahead stops at 128 (32 blocks).
  Scheduler near_end(c);
  near_end.add_request(request("b", iota(126, 100)));
  near_end.schedule();
  EXPECT_EQ(near_end.kv_cache_manager().block_table("b").size(), 32u);
  // 17 prompt tokens and max_tokens 2: the request never holds more than 19 tokens, so two
  // slots of lookahead (5 blocks), not four (6).
  Scheduler two_tokens(c);
  two_tokens.add_request(request("c", iota(17, 100), 2));
  two_tokens.schedule();
  EXPECT_EQ(two_tokens.kv_cache_manager().block_table("c").size(), 5u);
}

}  // namespace
}  // namespace pagoda
