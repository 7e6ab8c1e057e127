// The engine's log lines: non-default settings found by comparing with a default EngineArgs,
// vLLM's maximum concurrency, and the per-step debug summary.
#include "engine/engine_log.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "engine/request.h"

namespace pagoda {
namespace {

TEST(EngineLog, NonDefaultArgsListOnlyWhatChanged) {
  EXPECT_EQ(non_default_engine_args(EngineArgs{}), "");
  EngineArgs a;
  a.model = "demo";
  a.max_model_len = 2048;
  a.kv_cache_dtype = "fp32";
  a.enable_prefix_caching = false;
  a.kv_cache_space_bytes = uint64_t{1} << 30;
  a.max_num_seqs = EngineArgs{}.max_num_seqs;  // given, but the default: not listed
  EXPECT_EQ(non_default_engine_args(a),
            "model=demo, max_model_len=2048, kv_cache_space=1.00 GiB, kv_cache_dtype=fp32, "
            "enable_prefix_caching=false");
}

TEST(EngineLog, MaximumConcurrencyCountsWholeBlocks) {
  // 100 blocks of 16 tokens; a 2048-token request needs 128 blocks.
  EXPECT_DOUBLE_EQ(max_concurrency(100, 16, 2048), 100.0 / 128.0);
  // 40 tokens take 3 blocks: 300 blocks hold 100 such requests.
  EXPECT_DOUBLE_EQ(max_concurrency(300, 16, 40), 100.0);
  EXPECT_EQ(max_concurrency(300, 16, 0), 0.0);
}

TEST(EngineLog, StepSummaryTellsPrefillFromDecode) {
  SchedulerOutput out;
  ScheduledRequest a;
  a.request_id = "p";
  a.start_position = 0;
  a.num_new_tokens = 5;
  a.num_prompt_tokens = 8;
  ScheduledRequest b;
  b.request_id = "d";
  b.start_position = 4;  // past the 3-token prompt
  b.num_new_tokens = 1;
  b.num_prompt_tokens = 3;
  out.requests = {a, b};
  out.preempted_request_ids = {"x"};
  const StepSummary s = summarize_step(out, 7);
  EXPECT_EQ(s.num_prefill_requests, 1);
  EXPECT_EQ(s.num_prefill_tokens, 5);
  EXPECT_EQ(s.num_decode_requests, 1);
  EXPECT_EQ(s.num_decode_tokens, 1);
  EXPECT_EQ(s.num_preempted, 1);
  EXPECT_EQ(format_step(s, 3, 40, 512, 31.26),
            "step 7: 1 prefill (5 tokens), 1 decode (1 tokens), 1 preempted, 3 waiting, KV "
            "blocks 40/512, 31.3 ms");
}

}  // namespace
}  // namespace pagoda
