// The model runner: holds each running request's tokens, block table and sampler (updated from
// the SchedulerOutput's new-request data and per-step diffs), flattens a step into one
// ForwardBatch, runs the model, and samples. What it returns is ids and numbers only
// (ModelRunnerOutput): it knows nothing of text, stop strings or scheduling policy. After vLLM
// v1's GPUModelRunner with its persistent per-request state.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "device/execution_context.h"
#include "engine/proposer.h"
#include "engine/scheduler_output.h"
#include "engine/speculative_config.h"
#include "model/forward_batch.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "sampling/sampler.h"

namespace pagoda {

class ModelRunner {
 public:
  // With speculation enabled the runner drafts each decoding request's next tokens after
  // sampling it and verifies them in the request's next step (rejection_sampler.h). A runner
  // that does not sample is a tensor-parallel follower's: it runs its shard of each forward
  // pass and learns the sampled tokens from rank 0 (accept_sampled_tokens).
  // Method draft_model needs `draft_model` and its `draft_cache` (see make_proposer).
  ModelRunner(Model& model, KvCache& cache, const SpeculativeConfig& speculative_config = {},
              bool samples = true, Model* draft_model = nullptr, KvCache* draft_cache = nullptr);

  // Applies the step's request changes, performs its block copies, runs one forward pass and
  // samples every request whose last row was computed (and prompt logprobs where asked). A
  // runner that does not sample returns no ids (-1 for every request).
  ModelRunnerOutput execute_model(const SchedulerOutput& scheduler_output);

  // execute_model in two halves, for a pipeline's first stage, which starts the next batch
  // while later stages still run this one. begin_step applies the step's changes and runs
  // this rank's part of the forward pass; finish_step samples the oldest begun step (whose
  // SchedulerOutput it is given) from its logits, which a pipeline's rank 0 receives from the
  // last stage into oldest_step_logits() first. Steps finish in the order they began, and
  // requests of a begun step are in no later step until it finished.
  void begin_step(const SchedulerOutput& scheduler_output);
  std::span<float> oldest_step_logits();
  ModelRunnerOutput finish_step(const SchedulerOutput& scheduler_output);
  int64_t num_begun_steps() const { return static_cast<int64_t>(steps_.size()); }

  // Appends the tokens rank 0 sampled in a step (its sampled_token_ids: one per request of
  // `requests`, that step's, -1 where none) to this runner's copies of the requests.
  void accept_sampled_tokens(std::span<const ScheduledRequest> requests,
                             std::span<const int32_t> sampled_token_ids);

  int64_t num_requests() const { return static_cast<int64_t>(requests_.size()); }

 private:
  // The runner's copy of one request.
  struct RunnerRequest {
    std::vector<int32_t> token_ids;  // prompt, then what this runner sampled
    int32_t num_prompt_tokens = 0;
    std::vector<int32_t> block_ids;
    int32_t num_computed_tokens = 0;
    std::unique_ptr<RequestSampler> sampler;
    bool wants_logprobs = false;
    int num_top_prompt_logprobs = 0;  // params.prompt_logprobs
    // For the proposer: blocks (re)assigned this step, the temperature drafts are drawn at
    // (0: greedy), the sampling seed, and the drafts' distributions when they were sampled.
    bool readmitted = false;
    float temperature = 0.0f;
    uint64_t seed = 0;
    std::vector<float> draft_probs;  // [drafts, vocab], or empty: deterministic drafts
  };

  // A begun step, until it is sampled: its requests in batch order, per request its first
  // logits row (-1: none) and number of rows, and the logits [rows, vocab].
  struct Step {
    std::vector<RunnerRequest*> scheduled;
    std::vector<int64_t> logits_index;
    std::vector<int64_t> num_logit_rows;
    std::vector<float> logits;
    ExpertUsage experts;  // the routed experts its forward ran (MoE models)
  };

  void update_states(const SchedulerOutput& scheduler_output);
  // Fills batch_ and `step` (a new step's requests, rows and logits buffer).
  void prepare_inputs(const SchedulerOutput& scheduler_output, Step& step);
  // Prompt positions of the rows this step computed for requests with all_logits.
  void compute_prompt_logprobs(const SchedulerOutput& scheduler_output, const Step& step,
                               ModelRunnerOutput& out);
  // Samples request k of the step: verifies its drafts row by row (each accepted token
  // accept()ed by its sampler before the next row is processed, so penalties and logits
  // processors see exactly the tokens kept) and samples the token after the last accepted one.
  // Appends the new tokens to the runner's copy.
  // Samples a step's requests (and prompt logprobs where asked) into `result`.
  void sample_step(const SchedulerOutput& scheduler_output, Step& step, ModelRunnerOutput& result);
  void sample_request(Step& step, size_t k, const ScheduledRequest& scheduled);
  // Drafts the next step's tokens of the step's requests (drafts_); batch_ is the step's.
  void propose_drafts(const SchedulerOutput& scheduler_output, const Step& step);

  Model& model_;
  KvCache& cache_;
  bool sampling_ = true;
  ExecutionContext context_;  // the host's: the CPU device and this CPU's kernel table
  std::unordered_map<std::string, RunnerRequest> requests_;
  ForwardBatch batch_;                        // the last begun step's
  std::deque<Step> steps_;                    // begun and not finished, oldest first
  std::vector<Step> spare_steps_;             // finished, kept for their buffers
  std::vector<SampleResult> samples_;         // the last token of each request's step
  std::vector<int32_t> num_accepted_;         // drafts accepted per request
  // Per request asking for logprobs, those of its accepted drafts.
  std::vector<std::vector<PositionLogprobs>> draft_logprobs_;
  std::vector<std::vector<int32_t>> drafts_;  // per request, for its next step
  std::unique_ptr<Proposer> proposer_;        // null without speculation
  std::vector<ProposalRequest> proposals_;
  // One prompt position this step's logits answer: request, row, position.
  struct PromptRow {
    size_t scheduled_index = 0;
    const float* logits = nullptr;
    int32_t position = 0;
  };
  std::vector<PromptRow> prompt_rows_;
};

}  // namespace pagoda
