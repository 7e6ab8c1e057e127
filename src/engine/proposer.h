// The seam between the model runner and a speculative method: after a step is verified, a
// proposer drafts the next tokens of the step's requests. ngram (ngram_proposer.h) looks them up
// in the request's own tokens; mtp (mtp_proposer.h) runs DeepSeek-V3's multi-token-prediction
// layer over the target's hidden states; a draft model would run a second model. Each gets the
// same view of the step, so the runner does not know which method runs.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "device/execution_context.h"
#include "engine/speculative_config.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace pagoda {

// One request of the step just verified, in the target's batch order.
struct ProposalRequest {
  // Prompt and outputs, this step's accepted drafts and sampled token included.
  std::span<const int32_t> token_ids;
  std::span<const int32_t> block_ids;  // covering every slot the scheduler gave the request
  // The positions fed to the target this step whose tokens were kept: [first_position,
  // first_position + num_kept_positions); rejected drafts are left out. Their rows in the
  // target's batch (Model::hidden_states) start at first_row.
  int32_t first_position = 0;
  int32_t num_kept_positions = 0;
  int64_t first_row = 0;
  // Whether to draft: the request sampled a token this step and takes drafts (not a prefill
  // chunk short of the prompt's end, nor a request asking for logprobs).
  bool wants_drafts = false;
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  // drafts[i] (resized to requests.size(), each cleared first) gets up to
  // num_speculative_tokens tokens for requests[i] where wants_drafts; runs right after the
  // target's forward pass of the step (whose hidden states a model-based proposer reads).
  virtual void propose(const ExecutionContext& ctx, std::span<const ProposalRequest> requests,
                       std::vector<std::vector<int32_t>>& drafts) = 0;
};

// The proposer `config.method` names, over the target model and its cache (mtp drafts with the
// model's MTP layer and writes that layer's cache); nullptr when speculation is off.
std::unique_ptr<Proposer> make_proposer(const SpeculativeConfig& config, Model& model,
                                        KvCache& cache);

}  // namespace pagoda
