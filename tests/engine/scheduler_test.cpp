// Scheduler driven by a fake model (fake_model.h): budget and max_num_seqs, chunked prefill,
// prefix hits, preemption and resumption, aborts, starvation, n > 1 fork with copy-on-write,
// stop checks, the KV waste of a mixed workload, and batches in flight (pipeline parallelism).
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "fake_model.h"
#include "util/error.h"

namespace pagoda {
namespace {

using testing::FakeModel;

std::vector<int32_t> random_tokens(std::mt19937& rng, int32_t n) {
  std::uniform_int_distribution<int32_t> dist(0, 999);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& t : v) t = dist(rng);
  return v;
}

Request make_request(const std::string& id, std::vector<int32_t> prompt, int max_tokens,
                     std::optional<uint64_t> seed = std::nullopt) {
  SamplingParams params;
  params.max_tokens = max_tokens;
  params.seed = seed;
  return Request(id, std::move(prompt), params);
}

struct RunResult {
  std::map<std::string, std::vector<int32_t>> outputs;
  std::map<std::string, RequestStatus> status;
  std::map<std::string, int32_t> cached_prompt_tokens;
  int32_t num_steps = 0;
};

// Runs schedule -> fake model -> update until no request is left, checking the per-step
// invariants. `on_step` may add or abort requests between steps.
RunResult run(Scheduler& scheduler, FakeModel& model, int32_t max_steps = 100000,
              const std::function<void(int32_t step)>& on_step = {}) {
  RunResult result;
  const SchedulerConfig& config = scheduler.config();
  for (int32_t step = 0; step < max_steps; ++step) {
    if (on_step) on_step(step);
    if (!scheduler.has_unfinished_requests()) break;
    SchedulerOutput out = scheduler.schedule();
    int32_t total = 0;
    for (const ScheduledRequest& s : out.requests) {
      total += s.num_new_tokens;
      EXPECT_GT(s.num_new_tokens, 0);
      const Request* live = scheduler.find_request(s.request_id);
      EXPECT_NE(live, nullptr);
      if (live == nullptr) continue;
      EXPECT_EQ(s.start_position + s.num_new_tokens == live->num_tokens(), s.sample);
    }
    EXPECT_EQ(total, out.total_num_scheduled_tokens);
    EXPECT_LE(total, config.max_num_batched_tokens) << "step " << step;
    EXPECT_LE(static_cast<int32_t>(out.requests.size()), config.max_num_seqs);
    EXPECT_LE(scheduler.num_running(), config.max_num_seqs);
    ModelRunnerOutput mro = model.execute(out);
    for (const ScheduledRequest& s : out.requests) {
      // The runner's copy, built from new-request data and diffs, is the scheduler's request.
      const Request* live = scheduler.find_request(s.request_id);
      const FakeModel::State* state = model.state(s.request_id);
      EXPECT_NE(state, nullptr);
      if (state != nullptr && live != nullptr && s.sample) {
        std::vector<int32_t> expected = live->all_token_ids();
        expected.push_back(mro.sampled_token_ids[&s - out.requests.data()]);
        EXPECT_EQ(state->tokens, expected) << s.request_id;
      }
    }
    for (const EngineCoreOutput& u : scheduler.update_from_output(out, mro)) {
      auto& o = result.outputs[u.request_id];
      o.insert(o.end(), u.new_token_ids.begin(), u.new_token_ids.end());
      if (u.finished()) {
        result.status[u.request_id] = u.status;
        result.cached_prompt_tokens[u.request_id] = u.num_cached_tokens;
      }
    }
    result.num_steps = step + 1;
  }
  EXPECT_FALSE(scheduler.has_unfinished_requests());
  EXPECT_EQ(model.num_integrity_errors(), 0);
  return result;
}

SchedulerConfig roomy_config() {
  SchedulerConfig c;
  c.max_num_seqs = 256;
  c.max_num_batched_tokens = 4096;
  c.max_model_len = 2048;
  c.block_size = 16;
  c.num_kv_blocks = 4096;
  c.enable_prefix_caching = false;
  return c;
}

// Each request's output when it runs alone with plenty of room and no caching: the reference.
std::vector<int32_t> reference_output(const Request& request, int32_t max_model_len = 2048) {
  SchedulerConfig c = roomy_config();
  c.max_model_len = max_model_len;
  Scheduler scheduler(c);
  FakeModel model(c.num_kv_blocks, c.block_size);
  Request copy = request;
  copy.fork_leader_id.clear();
  scheduler.add_request(copy);
  RunResult r = run(scheduler, model);
  return r.outputs[request.request_id];
}

std::vector<Request> mixed_workload(std::mt19937& rng, int32_t count, int32_t max_prompt,
                                    int32_t max_output) {
  std::uniform_int_distribution<int32_t> prompt_len(1, max_prompt);
  std::uniform_int_distribution<int32_t> output_len(1, max_output);
  std::vector<Request> requests;
  for (int32_t i = 0; i < count; ++i) {
    requests.push_back(
        make_request(fmt::format("r{}", i), random_tokens(rng, prompt_len(rng)), output_len(rng)));
  }
  return requests;
}

TEST(Scheduler, BudgetAndMaxNumSeqsHoldAndOutputsMatchRunningAlone) {
  std::mt19937 rng(1);
  SchedulerConfig c = roomy_config();
  c.max_num_batched_tokens = 64;
  c.max_num_seqs = 5;
  Scheduler scheduler(c);
  FakeModel model(c.num_kv_blocks, c.block_size);
  auto requests = mixed_workload(rng, 30, 200, 20);
  for (const Request& r : requests) scheduler.add_request(r);
  RunResult result = run(scheduler, model);
  for (const Request& r : requests) {
    EXPECT_EQ(result.outputs[r.request_id], reference_output(r)) << r.request_id;
    EXPECT_EQ(result.status[r.request_id], RequestStatus::kFinishedLength);
  }
  EXPECT_EQ(scheduler.kv_cache_manager().num_free_blocks(), c.num_kv_blocks);
}

TEST(Scheduler, ChunkedPrefillSpreadsALongPromptOverSteps) {
  std::mt19937 rng(2);
  SchedulerConfig c = roomy_config();
  c.max_num_batched_tokens = 32;
  Scheduler scheduler(c);
  FakeModel model(c.num_kv_blocks, c.block_size);
  scheduler.add_request(make_request("long", random_tokens(rng, 100), 3));
  std::vector<int32_t> starts, sizes;
  std::vector<bool> samples;
  for (int step = 0; step < 6; ++step) {
    SchedulerOutput out = scheduler.schedule();
    ASSERT_EQ(out.requests.size(), 1u);
    starts.push_back(out.requests[0].start_position);
    sizes.push_back(out.requests[0].num_new_tokens);
    samples.push_back(out.requests[0].sample);
    scheduler.update_from_output(out, model.execute(out));
  }
  EXPECT_EQ(starts, (std::vector<int32_t>{0, 32, 64, 96, 100, 101}));
  EXPECT_EQ(sizes, (std::vector<int32_t>{32, 32, 32, 4, 1, 1}));
  EXPECT_EQ(samples, (std::vector<bool>{false, false, false, true, true, true}));
  EXPECT_FALSE(scheduler.has_unfinished_requests());
  EXPECT_EQ(model.num_integrity_errors(), 0);
}

TEST(Scheduler, PromptLogitsAreAskedForEveryPromptChunkAndNotTheCachedPrefix) {
  std::mt19937 rng(3);
  SchedulerConfig c = roomy_config();
  c.max_num_batched_tokens = 32;
  c.enable_prefix_caching = true;
  Scheduler scheduler(c);
  FakeModel model(c.num_kv_blocks, c.block_size);
  const std::vector<int32_t> prompt = random_tokens(rng, 70);
  // The same prompt first, so that its blocks are cached.
  scheduler.add_request(make_request("warm", prompt, 1));
  while (scheduler.has_unfinished_requests()) {
    SchedulerOutput out = scheduler.schedule();
    scheduler.update_from_output(out, model.execute(out));
  }
  Request with = make_request("with", prompt, 2);
  with.sampling_params.prompt_logprobs = 2;
  with.wants_prompt_logits = true;
  scheduler.add_request(std::move(with));
  std::vector<int32_t> starts;
  std::vector<bool> all_logits;
  for (int step = 0; step < 4; ++step) {
    SchedulerOutput out = scheduler.schedule();
    ASSERT_EQ(out.requests.size(), 1u);
    starts.push_back(out.requests[0].start_position);
    all_logits.push_back(out.requests[0].all_logits);
    scheduler.update_from_output(out, model.execute(out));
  }
  // From position 0 despite the cached prefix; every prompt chunk asks for all rows, the decode
  // step after it does not.
  EXPECT_EQ(starts, (std::vector<int32_t>{0, 32, 64, 70}));
  EXPECT_EQ(all_logits, (std::vector<bool>{true, true, true, false}));
  EXPECT_FALSE(scheduler.has_unfinished_requests());
  EXPECT_EQ(model.num_integrity_errors(), 0);
}

TEST(Scheduler, LongPrefillThresholdLetsShortPromptsIn) {
  std::mt19937 rng(3);
  SchedulerConfig c = roomy_config();
  c.max_num_batched_tokens = 64;
  c.long_prefill_token_threshold = 16;
  Scheduler scheduler(c);
  FakeModel model(c.num_kv_blocks, c.block_size);
  scheduler.add_request(make_request("long", random_tokens(rng, 200), 2));
  scheduler.add_request(make_request("short", random_tokens(rng, 10), 2));
  SchedulerOutput out = scheduler.schedule();
  ASSERT_EQ(out.requests.size(), 2u);
  EXPECT_EQ(out.requests[0].num_new_tokens, 16);
  EXPECT_EQ(out.requests[1].num_new_tokens, 10);
  EXPECT_TRUE(out.requests[1].sample);
}

TEST(Scheduler, PartialPrefillSlotsBoundPrefillsAndShareTheBudget) {
  std::mt19937 rng(11);
  SchedulerConfig c = roomy_config();
  c.max_num_batched_tokens = 64;
  c.long_prefill_token_threshold = 40;
  c.max_num_partial_prefills = 2;
  c.max_long_partial_prefills = 1;
  Scheduler scheduler(c);
  FakeModel model(c.num_kv_blocks, c.block_size);
  for (const char* id : {"long0", "long1", "long2"})
    scheduler.add_request(make_request(id, random_tokens(rng, 200), 2));
  for (const char* id : {"short0", "short1"})
    scheduler.add_request(make_request(id, random_tokens(rng, 20), 2));
  // Two slots, one of them for a long prompt: long0 and short0 (the later long prompts wait
  // while short0 goes ahead of them), each chunk at most half the budget.
  SchedulerOutput first = scheduler.schedule();
  ASSERT_EQ(first.requests.size(), 2u);
  EXPECT_EQ(first.requests[0].request_id, "long0");
  EXPECT_EQ(first.requests[0].num_new_tokens, 32);
  EXPECT_EQ(first.requests[1].request_id, "short0");
  EXPECT_EQ(first.requests[1].num_new_tokens, 20);
  EXPECT_TRUE(first.requests[1].sample);
  scheduler.update_from_output(first, model.execute(first));
  // short0 decodes (not a prefill); long0 keeps the long slot, short1 takes the other.
  SchedulerOutput second = scheduler.schedule();
  ASSERT_EQ(second.requests.size(), 3u);
  EXPECT_EQ(second.requests[0].request_id, "long0");
  EXPECT_EQ(second.requests[0].num_new_tokens, 32);
  EXPECT_EQ(second.requests[1].request_id, "short0");
  EXPECT_EQ(second.requests[1].num_new_tokens, 1);
  EXPECT_EQ(second.requests[2].request_id, "short1");
  EXPECT_EQ(second.requests[2].num_new_tokens, 20);
  bool short0_done = false;
  for (const EngineCoreOutput& u : scheduler.update_from_output(second, model.execute(second)))
    short0_done |= u.request_id == "short0" && u.finished();
  EXPECT_TRUE(short0_done);  // its two tokens came in the first two steps
  RunResult rest = run(scheduler, model);
  EXPECT_EQ(rest.status.size(), 4u);
}

TEST(Scheduler, ALonePrefillTakesTheWholeBudgetAndLongMeansFourPercentByDefault) {
  std::mt19937 rng(12);
  SchedulerConfig c = roomy_config();
  c.max_num_batched_tokens = 512;
  c.max_model_len = 2000;  // long: over 80 tokens left
  c.max_num_partial_prefills = 4;
  Scheduler scheduler(c);
  EXPECT_EQ(scheduler.config().long_prefill_token_threshold, 80);
  scheduler.add_request(make_request("a", random_tokens(rng, 70), 2));
  SchedulerOutput out = scheduler.schedule();
  ASSERT_EQ(out.requests.size(), 1u);
  EXPECT_EQ(out.requests[0].num_new_tokens, 70);  // alone: no share below its whole prompt

  Scheduler capped(c);
  capped.add_request(make_request("b", random_tokens(rng, 300), 2));
  out = capped.schedule();
  ASSERT_EQ(out.requests.size(), 1u);
  EXPECT_EQ(out.requests[0].num_new_tokens, 80);  // the threshold still caps a chunk
}

TEST(Scheduler, PartialPrefillSettingsAreChecked) {
  SchedulerConfig c = roomy_config();
  c.max_num_partial_prefills = 0;
  EXPECT_THROW(Scheduler{c}, Error);
  c.max_num_partial_prefills = 2;
  c.max_long_partial_prefills = 3;
  EXPECT_THROW(Scheduler{c}, Error);
  c.max_long_partial_prefills = 0;
  EXPECT_THROW(Scheduler{c}, Error);
  c.max_long_partial_prefills = 2;
  EXPECT_NO_THROW(Scheduler{c});
}

// A burst of long prompts ahead of short ones: with partial-prefill slots the short prompts get
// their first token within a few steps instead of after the long prompts' prefill, and every
// output is still what the request gives alone.
TEST(Scheduler, PartialPrefillsGiveShortPromptsTheirFirstTokenEarly) {
  std::mt19937 rng(13);
  std::vector<Request> requests;
  for (int i = 0; i < 6; ++i)
    requests.push_back(make_request(fmt::format("long{}", i), random_tokens(rng, 400), 4));
  for (int i = 0; i < 6; ++i)
    requests.push_back(make_request(fmt::format("short{}", i), random_tokens(rng, 24), 4));
  const auto first_token_steps = [&](int32_t partial_prefills) {
    SchedulerConfig c = roomy_config();
    c.max_num_batched_tokens = 128;
    c.long_prefill_token_threshold = 64;
    c.max_num_partial_prefills = partial_prefills;
    Scheduler scheduler(c);
    FakeModel model(c.num_kv_blocks, c.block_size);
    for (const Request& r : requests) scheduler.add_request(r);
    std::map<std::string, int32_t> first_step;
    std::map<std::string, std::vector<int32_t>> outputs;
    for (int32_t step = 0; scheduler.has_unfinished_requests() && step < 1000; ++step) {
      SchedulerOutput out = scheduler.schedule();
      EXPECT_LE(out.total_num_scheduled_tokens, c.max_num_batched_tokens);
      int32_t prefills = 0;
      for (const ScheduledRequest& s : out.requests) prefills += s.num_new_tokens > 1;
      if (partial_prefills > 1) {
        EXPECT_LE(prefills, partial_prefills);
      }
      for (const EngineCoreOutput& u : scheduler.update_from_output(out, model.execute(out))) {
        first_step.emplace(u.request_id, step);
        auto& o = outputs[u.request_id];
        o.insert(o.end(), u.new_token_ids.begin(), u.new_token_ids.end());
      }
    }
    EXPECT_FALSE(scheduler.has_unfinished_requests());
    EXPECT_EQ(model.num_integrity_errors(), 0);
    for (const Request& r : requests)
      EXPECT_EQ(outputs[r.request_id], reference_output(r)) << r.request_id;
    int32_t latest_short = 0;
    for (int i = 0; i < 6; ++i)
      latest_short = std::max(latest_short, first_step.at(fmt::format("short{}", i)));
    return latest_short;
  };
  const int32_t unbounded = first_token_steps(1);
  const int32_t bounded = first_token_steps(4);
  // Unbounded, the six long prompts take the budget 64 tokens each, two at a time, until all
  // are through; bounded (one long slot), the short prompts are in within the first steps.
  EXPECT_GE(unbounded, 10);
  EXPECT_LE(bounded, 3);
}

TEST(Scheduler, WithoutChunkedPrefillAPromptWaitsUntilItFitsWhole) {
  std::mt19937 rng(4);
  SchedulerConfig c = roomy_config();
  c.max_num_batched_tokens = 50;
  c.enable_chunked_prefill = false;
  Scheduler scheduler(c);
  FakeModel model(c.num_kv_blocks, c.block_size);
  EXPECT_THROW(scheduler.add_request(make_request("huge", random_tokens(rng, 51), 2)), Error);
  auto a = make_request("a", random_tokens(rng, 30), 3);
  auto b = make_request("b", random_tokens(rng, 30), 3);
  scheduler.add_request(a);
  scheduler.add_request(b);
  SchedulerOutput first = scheduler.schedule();
  ASSERT_EQ(first.requests.size(), 1u);  // b would need 30 of the 20 left: it waits whole
  EXPECT_EQ(first.requests[0].num_new_tokens, 30);
  scheduler.update_from_output(first, model.execute(first));
  SchedulerOutput second = scheduler.schedule();
  ASSERT_EQ(second.requests.size(), 2u);
  EXPECT_EQ(second.requests[1].num_new_tokens, 30);
  scheduler.update_from_output(second, model.execute(second));
  RunResult rest = run(scheduler, model);
  (void)rest;
}

TEST(Scheduler, RejectsRequestsThatCanNeverRun) {
  SchedulerConfig c = roomy_config();
  c.max_model_len = 100;
  Scheduler scheduler(c);
  EXPECT_THROW(scheduler.add_request(make_request("empty", {}, 5)), Error);
  EXPECT_THROW(scheduler.add_request(make_request("full", std::vector<int32_t>(100, 1), 5)), Error);
  scheduler.add_request(make_request("ok", std::vector<int32_t>(99, 1), 5));
  EXPECT_THROW(scheduler.add_request(make_request("ok", {1}, 5)), Error);  // duplicate id
  SchedulerConfig tiny = roomy_config();
  tiny.num_kv_blocks = 10;  // 2048 tokens need 128 blocks
  EXPECT_THROW(Scheduler{tiny}, Error);
  // A pool sized for the requests at hand checks each request against it instead.
  tiny.kv_pool_sized_by_need = true;
  Scheduler by_need(tiny);
  by_need.add_request(make_request("fits", std::vector<int32_t>(150, 1), 10));  // 10 blocks
  EXPECT_THROW(by_need.add_request(make_request("over", std::vector<int32_t>(150, 1), 11)), Error);
}

TEST(Scheduler, MaxModelLenEndsTheRequest) {
  SchedulerConfig c = roomy_config();
  c.max_model_len = 20;
  Scheduler scheduler(c);
  FakeModel model(c.num_kv_blocks, c.block_size);
  scheduler.add_request(make_request("a", std::vector<int32_t>(15, 3), 100));
  RunResult r = run(scheduler, model);
  EXPECT_EQ(r.outputs["a"].size(), 5u);
  EXPECT_EQ(r.status["a"], RequestStatus::kFinishedLength);
}

TEST(Scheduler, SecondRequestWithSamePrefixComputesOnlyTheRest) {
  std::mt19937 rng(5);
  SchedulerConfig c = roomy_config();
  c.enable_prefix_caching = true;
  c.max_num_batched_tokens = 512;
  Scheduler scheduler(c);
  FakeModel model(c.num_kv_blocks, c.block_size);
  const std::vector<int32_t> prefix = random_tokens(rng, 1000);
  auto with_suffix = [&](int32_t n) {
    std::vector<int32_t> p = prefix;
    auto s = random_tokens(rng, n);
    p.insert(p.end(), s.begin(), s.end());
    return p;
  };
  Request first = make_request("first", with_suffix(30), 4);
  scheduler.add_request(first);
  RunResult r1 = run(scheduler, model);
  const int64_t computed_before = model.num_tokens_computed();

  Request second = make_request("second", with_suffix(40), 4);
  scheduler.add_request(second);
  SchedulerOutput out = scheduler.schedule();
  ASSERT_EQ(out.requests.size(), 1u);
  // 1000 shared tokens = 62 full blocks of 16 (992 tokens) + 8 in a block that differs.
  EXPECT_EQ(out.requests[0].start_position, 992);
  EXPECT_EQ(out.requests[0].num_new_tokens, 1040 - 992);
  scheduler.update_from_output(out, model.execute(out));
  RunResult r2 = run(scheduler, model);
  EXPECT_EQ(model.num_tokens_computed() - computed_before, (1040 - 992) + 3);
  EXPECT_EQ(r2.cached_prompt_tokens["second"], 992);
  EXPECT_EQ(r1.outputs["first"], reference_output(first));
  std::vector<int32_t> second_out = reference_output(second);
  std::vector<int32_t> got = r2.outputs["second"];
  // The first token came from the step run above, outside run().
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(std::vector<int32_t>(second_out.begin() + 1, second_out.end()), got);
  const PrefixCacheStats& stats = scheduler.kv_cache_manager().prefix_cache_stats();
  EXPECT_EQ(stats.num_query_tokens, 1030 + 1040);
  EXPECT_EQ(stats.num_hit_tokens, 992);
}

TEST(Scheduler, IdenticalPromptStillComputesItsLastToken) {
  SchedulerConfig c = roomy_config();
  c.enable_prefix_caching = true;
  Scheduler scheduler(c);
  FakeModel model(c.num_kv_blocks, c.block_size);
  std::vector<int32_t> prompt(64);
  std::iota(prompt.begin(), prompt.end(), 1);
  scheduler.add_request(make_request("a", prompt, 2));
  run(scheduler, model);
  scheduler.add_request(make_request("b", prompt, 2));
  SchedulerOutput out = scheduler.schedule();
  ASSERT_EQ(out.requests.size(), 1u);
  EXPECT_EQ(out.requests[0].start_position, 48);  // 3 of 4 blocks hit: block 3 recomputed
  EXPECT_EQ(out.requests[0].num_new_tokens, 16);
  EXPECT_TRUE(out.requests[0].sample);
}

// Tight pool, many requests: preemption must happen, and every output must still equal the
// request's output when run alone (recompute after preemption is exact).
void preemption_case(bool prefix_caching, bool chunked) {
  std::mt19937 rng(6);
  SchedulerConfig c;
  c.max_num_seqs = 16;
  c.max_num_batched_tokens = chunked ? 48 : 256;
  c.max_model_len = 256;
  c.block_size = 8;
  c.num_kv_blocks = 40;  // 320 slots for up to 16 sequences
  c.enable_prefix_caching = prefix_caching;
  c.enable_chunked_prefill = chunked;
  Scheduler scheduler(c);
  FakeModel model(c.num_kv_blocks, c.block_size);
  model.check_exclusive_writes(&scheduler.kv_cache_manager().block_pool());
  auto requests = mixed_workload(rng, 24, 100, 60);
  for (const Request& r : requests) scheduler.add_request(r);
  RunResult result = run(scheduler, model);
  EXPECT_GT(scheduler.num_preemptions(), 0);
  for (const Request& r : requests) {
    EXPECT_EQ(result.outputs[r.request_id], reference_output(r, c.max_model_len)) << r.request_id;
  }
  EXPECT_EQ(model.num_shared_writes(), 0);
  EXPECT_EQ(scheduler.kv_cache_manager().num_free_blocks(), c.num_kv_blocks);
  std::printf("preemption case caching=%d chunked=%d: %lld preemptions in %d steps\n",
              prefix_caching, chunked, static_cast<long long>(scheduler.num_preemptions()),
              result.num_steps);
}

TEST(Scheduler, PreemptionAndResumptionGiveIdenticalOutputs) {
  preemption_case(false, true);
}
TEST(Scheduler, PreemptionWithPrefixCaching) {
  preemption_case(true, true);
}
TEST(Scheduler, PreemptionWithoutChunkedPrefill) {
  preemption_case(true, false);
}

// A pipeline's batch queue (engine_core.h's step_with_batch_queue): up to `depth` batches in
// flight, each run by the fake model only when its output is taken (the last stage runs it
// after later batches were scheduled), outputs applied in order. Checks that no request is in
// two batches in flight.
RunResult run_pipelined(Scheduler& scheduler, FakeModel& model, size_t depth,
                        size_t& most_in_flight) {
  RunResult result;
  std::deque<SchedulerOutput> in_flight;
  std::set<std::string> busy;
  most_in_flight = 0;
  for (int32_t step = 0; step < 100000; ++step) {
    if (!scheduler.has_unfinished_requests() && in_flight.empty()) break;
    if (in_flight.size() < depth) {
      SchedulerOutput out = scheduler.schedule();
      for (const ScheduledRequest& s : out.requests)
        EXPECT_TRUE(busy.insert(s.request_id).second) << s.request_id << " scheduled twice";
      const bool computes = !out.empty();
      if (computes || !out.finished_request_ids.empty()) in_flight.push_back(std::move(out));
      most_in_flight = std::max(most_in_flight, in_flight.size());
      if (computes && in_flight.size() < depth) continue;
    }
    if (in_flight.empty()) continue;
    const SchedulerOutput out = std::move(in_flight.front());
    in_flight.pop_front();
    const ModelRunnerOutput mro = model.execute(out);
    for (const ScheduledRequest& s : out.requests) busy.erase(s.request_id);
    for (const EngineCoreOutput& u : scheduler.update_from_output(out, mro)) {
      auto& o = result.outputs[u.request_id];
      o.insert(o.end(), u.new_token_ids.begin(), u.new_token_ids.end());
      if (u.finished()) result.status[u.request_id] = u.status;
    }
    ++result.num_steps;
  }
  EXPECT_FALSE(scheduler.has_unfinished_requests());
  EXPECT_EQ(model.num_integrity_errors(), 0);
  return result;
}

// Two batches in flight on the tight pool of preemption_case, with prefix caching and chunked
// prefill: every output is still the request's output alone, and no block a batch in flight
// writes is handed to another request before that batch is back.
TEST(Scheduler, PipelinedBatchesGiveTheOutputsOfOneBatchAtATime) {
  for (const bool chunked : {true, false}) {
    std::mt19937 rng(6);
    SchedulerConfig c;
    c.max_num_seqs = 16;
    c.max_num_batched_tokens = chunked ? 48 : 256;
    c.max_model_len = 256;
    c.block_size = 8;
    c.num_kv_blocks = 40;
    c.enable_prefix_caching = true;
    c.enable_chunked_prefill = chunked;
    c.max_concurrent_batches = 2;
    Scheduler scheduler(c);
    FakeModel model(c.num_kv_blocks, c.block_size);
    model.check_exclusive_writes(&scheduler.kv_cache_manager().block_pool());
    auto requests = mixed_workload(rng, 24, 100, 60);
    // Shared prefixes, so that prefix-cache hits happen with batches in flight.
    for (size_t i = 1; i < requests.size(); i += 3) {
      std::vector<int32_t> prompt = requests[0].all_token_ids();
      prompt.push_back(static_cast<int32_t>(i));
      requests[i] = make_request(requests[i].request_id, prompt, 20);
    }
    for (const Request& r : requests) scheduler.add_request(r);
    size_t most_in_flight = 0;
    RunResult result = run_pipelined(scheduler, model, 2, most_in_flight);
    EXPECT_EQ(most_in_flight, 2u);
    EXPECT_GT(scheduler.num_preemptions(), 0);
    EXPECT_GT(scheduler.kv_cache_manager().prefix_cache_stats().num_hit_tokens, 0);
    for (const Request& r : requests) {
      EXPECT_EQ(result.outputs[r.request_id], reference_output(r, c.max_model_len)) << r.request_id;
    }
    EXPECT_EQ(model.num_shared_writes(), 0);
    EXPECT_EQ(scheduler.kv_cache_manager().num_free_blocks(), c.num_kv_blocks);
  }
}

// Each batch takes an even share of the live requests, so the batches in flight are alike.
TEST(Scheduler, PipelinedBatchesShareTheRequests) {
  SchedulerConfig c = roomy_config();
  c.max_concurrent_batches = 2;
  Scheduler scheduler(c);
  for (int i = 0; i < 5; ++i)
    scheduler.add_request(make_request(fmt::format("r{}", i), std::vector<int32_t>(8, i), 4));
  const SchedulerOutput first = scheduler.schedule();
  const SchedulerOutput second = scheduler.schedule();
  EXPECT_EQ(first.requests.size(), 3u);
  EXPECT_EQ(second.requests.size(), 2u);
  EXPECT_TRUE(scheduler.schedule().empty()) << "every request is in a batch in flight";
}

// A request aborted while its batch is in flight keeps its blocks (the later stages still write
// them) and ends when that batch's output comes back, with no output of its own.
TEST(Scheduler, AbortOfARequestInFlightWaitsForItsBatch) {
  SchedulerConfig c = roomy_config();
  c.max_concurrent_batches = 2;
  Scheduler scheduler(c);
  FakeModel model(c.num_kv_blocks, c.block_size);
  scheduler.add_request(make_request("a", std::vector<int32_t>(20, 2), 5));
  scheduler.add_request(make_request("b", std::vector<int32_t>(20, 3), 5));
  const SchedulerOutput first = scheduler.schedule();
  ASSERT_EQ(first.requests.size(), 1u);
  EXPECT_EQ(first.requests[0].request_id, "a");
  const SchedulerOutput second = scheduler.schedule();
  ASSERT_EQ(second.requests.size(), 1u);
  EXPECT_EQ(scheduler.abort_request("a"), nullptr);
  ASSERT_NE(scheduler.find_request("a"), nullptr);
  EXPECT_EQ(scheduler.kv_cache_manager().num_free_blocks(), c.num_kv_blocks - 4);  // 2 each
  const auto updates = scheduler.update_from_output(first, model.execute(first));
  EXPECT_TRUE(updates.empty());
  EXPECT_EQ(scheduler.find_request("a"), nullptr);
  EXPECT_EQ(scheduler.update_from_output(second, model.execute(second)).size(), 1u);
  const SchedulerOutput third = scheduler.schedule();
  EXPECT_EQ(third.finished_request_ids, std::vector<std::string>{"a"});
}

TEST(Scheduler, PreemptsTheNewestRunningRequest) {
  SchedulerConfig c;
  c.max_num_batched_tokens = 64;
  c.max_model_len = 32;
  c.block_size = 4;
  c.num_kv_blocks = 8;
  c.enable_prefix_caching = false;
  Scheduler scheduler(c);
  FakeModel model(c.num_kv_blocks, c.block_size);
  // Three requests of 8 tokens: 6 blocks; growing past a block each needs 3 more.
  for (const char* id : {"old", "mid", "new"}) {
    scheduler.add_request(make_request(id, std::vector<int32_t>(8, 1), 20));
  }
  std::vector<std::string> preempted;
  for (int step = 0; step < 3 && preempted.empty(); ++step) {
    SchedulerOutput out = scheduler.schedule();
    preempted = out.preempted_request_ids;
    scheduler.update_from_output(out, model.execute(out));
  }
  ASSERT_FALSE(preempted.empty());
  EXPECT_EQ(preempted.front(), "new");
  const Request* victim = scheduler.find_request("new");
  ASSERT_NE(victim, nullptr);
  EXPECT_EQ(victim->status, RequestStatus::kPreempted);
  EXPECT_EQ(victim->num_computed_tokens, 0);
  EXPECT_EQ(victim->num_preemptions, 1);
  run(scheduler, model);
}

TEST(Scheduler, AbortDuringPrefillDecodeAndWaitingFreesEverything) {
  std::mt19937 rng(7);
  SchedulerConfig c = roomy_config();
  c.max_num_batched_tokens = 40;
  c.max_num_seqs = 2;
  c.enable_prefix_caching = true;
  Scheduler scheduler(c);
  FakeModel model(c.num_kv_blocks, c.block_size);
  scheduler.add_request(make_request("decoding", random_tokens(rng, 10), 50));
  scheduler.add_request(make_request("prefilling", random_tokens(rng, 300), 50));
  scheduler.add_request(make_request("waiting", random_tokens(rng, 10), 50));
  for (int step = 0; step < 3; ++step) {
    SchedulerOutput out = scheduler.schedule();
    scheduler.update_from_output(out, model.execute(out));
  }
  const Request* p = scheduler.find_request("prefilling");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->status, RequestStatus::kRunning);
  EXPECT_LT(p->num_computed_tokens, p->num_prompt_tokens());
  EXPECT_GT(scheduler.find_request("decoding")->num_output_tokens(), 0);
  EXPECT_EQ(scheduler.find_request("waiting")->status, RequestStatus::kWaiting);

  auto aborted = scheduler.abort_request("prefilling");
  ASSERT_NE(aborted, nullptr);
  EXPECT_EQ(aborted->status, RequestStatus::kFinishedAborted);
  EXPECT_EQ(finish_reason_name(aborted->status), "abort");
  EXPECT_NE(scheduler.abort_request("decoding"), nullptr);
  EXPECT_NE(scheduler.abort_request("waiting"), nullptr);
  EXPECT_EQ(scheduler.abort_request("waiting"), nullptr);  // already gone
  EXPECT_EQ(scheduler.kv_cache_manager().num_free_blocks(), c.num_kv_blocks);
  EXPECT_FALSE(scheduler.has_unfinished_requests());
  SchedulerOutput next = scheduler.schedule();
  EXPECT_TRUE(next.empty());
  std::vector<std::string> finished = next.finished_request_ids;
  std::sort(finished.begin(), finished.end());
  EXPECT_EQ(finished, (std::vector<std::string>{"decoding", "prefilling", "waiting"}));
}

TEST(Scheduler, AbortBetweenScheduleAndUpdateIsSkipped) {
  SchedulerConfig c = roomy_config();
  Scheduler scheduler(c);
  FakeModel model(c.num_kv_blocks, c.block_size);
  scheduler.add_request(make_request("a", std::vector<int32_t>(20, 2), 5));
  scheduler.add_request(make_request("b", std::vector<int32_t>(20, 3), 5));
  SchedulerOutput out = scheduler.schedule();
  ModelRunnerOutput mro = model.execute(out);
  scheduler.abort_request("a");
  auto updates = scheduler.update_from_output(out, mro);
  ASSERT_EQ(updates.size(), 1u);
  EXPECT_EQ(updates[0].request_id, "b");
  scheduler.abort_request("b");
  EXPECT_EQ(scheduler.kv_cache_manager().num_free_blocks(), c.num_kv_blocks);
}

TEST(Scheduler, NoRequestStarvesUnderSustainedPressure) {
  std::mt19937 rng(8);
  SchedulerConfig c;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 64;
  c.max_model_len = 256;
  c.block_size = 8;
  c.num_kv_blocks = 48;
  c.enable_prefix_caching = true;
  Scheduler scheduler(c);
  FakeModel model(c.num_kv_blocks, c.block_size);
  std::map<std::string, int32_t> arrival_step;
  int32_t next_id = 0;
  const int32_t kArrivalSteps = 400;
  // One new request every 3 steps for 400 steps, plus a burst at the start.
  auto arrivals = [&](int32_t step) {
    const int32_t count = step == 0 ? 20 : (step < kArrivalSteps && step % 3 == 0 ? 1 : 0);
    for (int32_t i = 0; i < count; ++i) {
      const std::string id = fmt::format("s{}", next_id++);
      std::uniform_int_distribution<int32_t> plen(1, 120), olen(1, 40);
      scheduler.add_request(make_request(id, random_tokens(rng, plen(rng)), olen(rng)));
      arrival_step[id] = step;
    }
  };
  std::map<std::string, int32_t> latency_steps;
  int32_t step = 0;
  for (; step < 5000; ++step) {
    arrivals(step);
    if (!scheduler.has_unfinished_requests() && step >= kArrivalSteps) break;
    SchedulerOutput out = scheduler.schedule();
    for (auto& u : scheduler.update_from_output(out, model.execute(out))) {
      if (u.finished()) latency_steps[u.request_id] = step - arrival_step[u.request_id];
    }
  }
  EXPECT_FALSE(scheduler.has_unfinished_requests());
  EXPECT_EQ(latency_steps.size(), arrival_step.size());
  int32_t worst = 0;
  for (const auto& [id, steps] : latency_steps) worst = std::max(worst, steps);
  std::printf("starvation check: %zu requests, %lld preemptions, worst latency %d steps\n",
              latency_steps.size(), static_cast<long long>(scheduler.num_preemptions()), worst);
  // A request needs at most ~120/64 prefill + 40 decode steps alone; FCFS with preempt-newest
  // bounds the wait by the work queued ahead of it (here a few dozen requests at most).
  EXPECT_LT(worst, 600);
  EXPECT_EQ(model.num_integrity_errors(), 0);
}

TEST(Scheduler, OldestRequestIsNeverPreemptedByNewcomers) {
  SchedulerConfig c;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 64;
  c.max_model_len = 128;
  c.block_size = 4;
  c.num_kv_blocks = 40;
  c.enable_prefix_caching = false;
  Scheduler scheduler(c);
  FakeModel model(c.num_kv_blocks, c.block_size);
  scheduler.add_request(make_request("oldest", std::vector<int32_t>(20, 1), 100));
  int32_t added = 0;
  for (int step = 0; step < 200 && scheduler.find_request("oldest") != nullptr; ++step) {
    if (step % 2 == 0) {
      scheduler.add_request(
          make_request(fmt::format("n{}", added++), std::vector<int32_t>(30, 2), 30));
    }
    SchedulerOutput out = scheduler.schedule();
    for (const auto& id : out.preempted_request_ids) EXPECT_NE(id, "oldest");
    scheduler.update_from_output(out, model.execute(out));
  }
  EXPECT_EQ(scheduler.find_request("oldest"), nullptr) << "the oldest request never finished";
}

TEST(Scheduler, SamplesOfOnePromptShareBlocksWithCopyOnWrite) {
  for (int32_t prompt_len : {50, 48}) {
    std::mt19937 rng(9);
    SchedulerConfig c = roomy_config();
    c.enable_prefix_caching = false;  // sharing must come from the fork, not the cache
    Scheduler scheduler(c);
    FakeModel model(c.num_kv_blocks, c.block_size);
    model.check_exclusive_writes(&scheduler.kv_cache_manager().block_pool());
    Request parent = make_request("p", random_tokens(rng, prompt_len), 12, 1234);
    parent.sampling_params.n = 4;
    std::vector<Request> samples = split_samples(parent);
    ASSERT_EQ(samples.size(), 4u);
    EXPECT_EQ(samples[0].request_id, "p#0");
    EXPECT_TRUE(samples[0].fork_leader_id.empty());
    EXPECT_EQ(samples[3].fork_leader_id, "p#0");
    EXPECT_EQ(samples[3].sampling_params.seed, 1237u);
    for (const Request& s : samples) scheduler.add_request(s);

    SchedulerOutput first = scheduler.schedule();
    ASSERT_EQ(first.requests.size(), 1u);  // only the leader prefills
    EXPECT_EQ(first.requests[0].request_id, "p#0");
    EXPECT_EQ(first.requests[0].num_new_tokens, prompt_len);
    scheduler.update_from_output(first, model.execute(first));

    SchedulerOutput second = scheduler.schedule();
    ASSERT_EQ(second.requests.size(), 4u);
    ASSERT_EQ(second.block_copies.size(), 3u);
    const auto leader_span = scheduler.kv_cache_manager().block_table("p#0");
    const std::vector<int32_t> leader_table(leader_span.begin(), leader_span.end());
    // The forked samples reach the runner as new requests, with their whole block tables.
    ASSERT_EQ(second.new_requests.size(), 3u);
    const size_t last_block = static_cast<size_t>((prompt_len - 1) / c.block_size);
    for (size_t i = 1; i < 4; ++i) {
      const ScheduledRequest& s = second.requests[i];
      EXPECT_EQ(s.start_position, prompt_len - 1);
      EXPECT_EQ(s.num_new_tokens, 1);
      EXPECT_TRUE(s.sample);
      const NewRequestData& data = second.new_requests[i - 1];
      EXPECT_EQ(data.request_id, s.request_id);
      EXPECT_EQ(data.num_computed_tokens, prompt_len - 1);
      ASSERT_EQ(data.block_ids.size(), last_block + 1);
      for (size_t b = 0; b < last_block; ++b) EXPECT_EQ(data.block_ids[b], leader_table[b]);
      EXPECT_EQ(second.block_copies[i - 1],
                (BlockCopy{leader_table[last_block], data.block_ids[last_block]}));
    }
    const BlockPool& pool = scheduler.kv_cache_manager().block_pool();
    EXPECT_EQ(pool.ref_count(leader_table[0]), 4);
    scheduler.update_from_output(second, model.execute(second));
    RunResult rest = run(scheduler, model);

    // Prompt computed once, plus one recomputed token per extra sample.
    EXPECT_EQ(model.num_tokens_computed(), prompt_len + 3 + 4 * 11);
    EXPECT_EQ(model.num_shared_writes(), 0);
    std::set<std::vector<int32_t>> distinct;
    for (const Request& s : samples) {
      const std::vector<int32_t> expected = reference_output(s);
      // Tokens sampled in the two manual steps are not in `rest`; compare the tail.
      const std::vector<int32_t>& got = rest.outputs[s.request_id];
      const size_t skipped = s.request_id == "p#0" ? 2 : 1;
      ASSERT_EQ(got.size() + skipped, expected.size()) << s.request_id;
      EXPECT_TRUE(std::equal(got.begin(), got.end(), expected.begin() + skipped)) << s.request_id;
      distinct.insert(expected);
    }
    EXPECT_EQ(distinct.size(), 4u);  // different seeds, different samples
    EXPECT_EQ(scheduler.kv_cache_manager().num_free_blocks(), c.num_kv_blocks);
  }
}

TEST(Scheduler, SampleWhoseLeaderIsGoneComputesItsOwnPrompt) {
  SchedulerConfig c = roomy_config();
  Scheduler scheduler(c);
  FakeModel model(c.num_kv_blocks, c.block_size);
  Request parent = make_request("q", std::vector<int32_t>(40, 5), 3, 7);
  parent.sampling_params.n = 2;
  std::vector<Request> samples = split_samples(parent);
  for (const Request& s : samples) scheduler.add_request(s);
  scheduler.abort_request("q#0");
  RunResult r = run(scheduler, model);
  EXPECT_EQ(r.outputs["q#1"], reference_output(samples[1]));
}

TEST(Scheduler, StopChecks) {
  SchedulerConfig c = roomy_config();
  const int32_t kEos = 2;
  auto scripted = [](const FakeModel::State& r, std::span<const int32_t>) {
    static const std::vector<int32_t> script{5, kEos, 7, 9, kEos, 11, 13, 15};
    return script[static_cast<size_t>(r.num_output_tokens()) % script.size()];
  };
  auto run_one = [&](SamplingParams params) {
    Scheduler scheduler(c);
    FakeModel model(c.num_kv_blocks, c.block_size);
    model.set_next_token(scripted);
    scheduler.add_request(Request("x", {1, 1, 1}, params, {kEos}));
    RunResult r = run(scheduler, model);
    return std::make_pair(r.outputs["x"], r.status["x"]);
  };
  SamplingParams p;
  p.max_tokens = 8;
  auto [out, status] = run_one(p);
  EXPECT_EQ(out, (std::vector<int32_t>{5, kEos}));
  EXPECT_EQ(status, RequestStatus::kFinishedStopped);

  p.min_tokens = 3;  // EOS at output 2 ignored, stop at the next one (output 5)
  std::tie(out, status) = run_one(p);
  EXPECT_EQ(out, (std::vector<int32_t>{5, kEos, 7, 9, kEos}));
  EXPECT_EQ(status, RequestStatus::kFinishedStopped);

  p.min_tokens = 0;
  p.ignore_eos = true;
  std::tie(out, status) = run_one(p);
  EXPECT_EQ(out.size(), 8u);
  EXPECT_EQ(status, RequestStatus::kFinishedLength);
  EXPECT_EQ(finish_reason_name(status), "length");

  p.stop_token_ids = {9};
  std::tie(out, status) = run_one(p);
  EXPECT_EQ(out, (std::vector<int32_t>{5, kEos, 7, 9}));
  EXPECT_EQ(status, RequestStatus::kFinishedStopped);

  // The engine's stop-string match ends a request from outside.
  Scheduler scheduler(c);
  scheduler.add_request(make_request("s", {1, 2, 3}, 10));
  auto finished = scheduler.finish_request("s", RequestStatus::kFinishedStopped);
  ASSERT_NE(finished, nullptr);
  EXPECT_EQ(finished->status, RequestStatus::kFinishedStopped);
  EXPECT_FALSE(scheduler.has_unfinished_requests());
}

TEST(Scheduler, KvWasteUnderMixedWorkload) {
  std::mt19937 rng(10);
  SchedulerConfig c;
  c.max_num_seqs = 32;
  c.max_num_batched_tokens = 2048;
  c.max_model_len = 2048;
  c.block_size = 16;
  c.num_kv_blocks = 1024;
  c.enable_prefix_caching = true;
  Scheduler scheduler(c);
  FakeModel model(c.num_kv_blocks, c.block_size);
  auto requests = mixed_workload(rng, 200, 1000, 300);
  for (const Request& r : requests) scheduler.add_request(r);
  double waste_sum = 0;
  int64_t allocated_sum = 0, used_sum = 0;
  int32_t samples = 0;
  while (scheduler.has_unfinished_requests()) {
    SchedulerOutput out = scheduler.schedule();
    scheduler.update_from_output(out, model.execute(out));
    const KvSlotUsage usage = scheduler.kv_slot_usage();
    if (usage.num_allocated_slots == 0) continue;
    waste_sum += usage.waste_percent();
    allocated_sum += usage.num_allocated_slots;
    used_sum += usage.num_used_slots;
    ++samples;
  }
  ASSERT_GT(samples, 0);
  const double pooled =
      100.0 * static_cast<double>(allocated_sum - used_sum) / static_cast<double>(allocated_sum);
  std::printf(
      "KV waste, mixed workload (200 requests, prompts 1-1000, outputs 1-300, block 16): "
      "mean %.2f%% per step, %.2f%% over all slot-steps, %lld preemptions\n",
      waste_sum / samples, pooled, static_cast<long long>(scheduler.num_preemptions()));
  // Only the unfilled tail of each sequence's last block is wasted: < block_size slots per
  // running request.
  EXPECT_LT(pooled, 4.0);
  EXPECT_EQ(model.num_integrity_errors(), 0);
}

}  // namespace
}  // namespace pagoda
