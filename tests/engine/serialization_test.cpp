// SchedulerOutput and ModelRunnerOutput survive encode -> decode unchanged, with every field set
// to something other than its default, and bytes that are not a message are a clear error.
#include "engine/serialization.h"

#include <map>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "engine/scheduler.h"
#include "fake_model.h"
#include "util/error.h"

namespace pagoda {
namespace {

SamplingParams unusual_params() {
  SamplingParams p;
  p.n = 3;
  p.temperature = 0.7f;
  p.top_p = 0.9f;
  p.top_k = 40;
  p.min_p = 0.05f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = -0.25f;
  p.repetition_penalty = 1.1f;
  p.seed = 0xFFFFFFFFFFFFFFF0ull;  // beyond int64: unsigned all the way
  p.stop = {"\n\n", "ü"};
  p.stop_token_ids = {7, 9};
  p.ignore_eos = true;
  p.max_tokens = 123;
  p.min_tokens = 4;
  p.logprobs = 5;
  p.prompt_logprobs = 0;
  p.logit_bias = {{3, -100.0f}, {12, 2.5f}};
  p.allowed_token_ids = {{3, 12, 40}};
  p.bad_words = {"bad word"};
  p.bad_words_token_ids = {{50, 51}, {52}};
  p.skip_special_tokens = false;
  p.include_stop_str_in_output = true;
  p.output_kind = RequestOutputKind::kDelta;
  StructuredOutputsParams so;
  so.choice = std::vector<std::string>{"yes", "no"};
  so.any_whitespace = true;
  p.structured_outputs = so;
  return p;
}

TEST(Serialization, SchedulerOutputRoundTripsWithEveryFieldSet) {
  SchedulerOutput out;
  out.new_requests.push_back(
      {"a#1", {1, 2, 3}, unusual_params(), {2, 32000}, 99, {4, 5}, 2, nullptr, {7, 8}});
  out.cached_requests.push_back({"b", true, {8, 9, 10}, 17});
  out.cached_requests.push_back({"c", false, {}, 40});
  out.requests.push_back({"b", 17, 4, 12, true, false, {7, 8, 9}});
  out.requests.push_back({"a#1", 2, 1, 3, true, true, {}});
  out.total_num_scheduled_tokens = 2;
  out.block_copies.push_back({3, 5});
  out.preempted_request_ids = {"z"};
  out.finished_request_ids = {"y", "x"};
  const std::vector<uint8_t> bytes = encode(out);
  EXPECT_EQ(decode_scheduler_output(bytes), out);
  // And the default-constructed one.
  EXPECT_EQ(decode_scheduler_output(encode(SchedulerOutput{})), SchedulerOutput{});
}

TEST(Serialization, ModelRunnerOutputRoundTripsWithLogprobs) {
  ModelRunnerOutput out;
  out.sampled_token_ids = {5, -1};
  out.logprobs = {PositionLogprobs{{5, -0.125f, 0}, {{5, -0.125f, 0}, {6, -2.5f, 0}}},
                  std::nullopt};
  PromptLogprobsChunk chunk;
  chunk.first_position = 1;
  chunk.positions.push_back({{3, -1.5f, 2}, {{1, -0.5f, 1}}});
  out.prompt_logprobs = {std::nullopt, chunk};
  out.num_accepted_draft_tokens = {2, 0};
  out.draft_logprobs = {{PositionLogprobs{{4, -0.25f, 0}, {{4, -0.25f, 0}}},
                         PositionLogprobs{{4, -0.75f, 0}, {{1, -0.5f, 0}}}},
                        {}};
  out.draft_token_ids = {{4, 4, 1}, {}};
  out.num_moe_layers = 26;
  out.num_routed_experts = 402;
  EXPECT_EQ(decode_model_runner_output(encode(out)), out);
}

// A whole run of the scheduler where every step goes through bytes on the way to the runner and
// back gives the same outputs as one that does not: the plain data is all a runner needs.
TEST(Serialization, ARunThroughBytesMatchesADirectRun) {
  auto run_all = [](bool through_bytes) {
    SchedulerConfig c;
    c.max_num_batched_tokens = 64;
    c.max_model_len = 512;
    c.block_size = 16;
    c.num_kv_blocks = 40;  // tight: preemptions happen
    Scheduler scheduler(c);
    testing::FakeModel model(c.num_kv_blocks, c.block_size);
    for (int i = 0; i < 12; ++i) {
      SamplingParams p;
      p.max_tokens = 20 + i;
      p.seed = static_cast<uint64_t>(i);
      scheduler.add_request(Request(
          fmt::format("r{}", i), std::vector<int32_t>(static_cast<size_t>(30 + 7 * i), i + 3), p));
    }
    std::map<std::string, std::vector<int32_t>> outputs;
    while (scheduler.has_unfinished_requests()) {
      SchedulerOutput out = scheduler.schedule();
      ModelRunnerOutput result;
      if (through_bytes) {
        const SchedulerOutput received = decode_scheduler_output(encode(out));
        result = decode_model_runner_output(encode(model.execute(received)));
      } else {
        result = model.execute(out);
      }
      for (const EngineCoreOutput& o : scheduler.update_from_output(out, result)) {
        auto& v = outputs[o.request_id];
        v.insert(v.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      }
    }
    EXPECT_EQ(model.num_integrity_errors(), 0);
    EXPECT_GT(scheduler.num_preemptions(), 0);
    return outputs;
  };
  EXPECT_EQ(run_all(true), run_all(false));
}

TEST(Serialization, BytesThatAreNotAMessageAreAnError) {
  const std::vector<uint8_t> garbage = {0xc1, 0x00, 0x13};
  EXPECT_THROW(decode_scheduler_output(garbage), Error);
  EXPECT_THROW(decode_model_runner_output(garbage), Error);
  // A valid MessagePack value that is not a SchedulerOutput.
  const std::vector<uint8_t> number = {0x2a};
  EXPECT_THROW(decode_scheduler_output(number), Error);
}

}  // namespace
}  // namespace pagoda
