// The seam between the model runner and a speculative method: after a step is verified, a
// proposer drafts the next tokens of the step's requests. ngram (ngram_proposer.h) looks them up
// in the request's own tokens; mtp (mtp_proposer.h) runs DeepSeek-V3's multi-token-prediction
// layer over the target's hidden states; draft_model (draft_model_proposer.h) runs a second,
// smaller model with a paged KV cache of its own. Each gets the same view of the step, so the
// runner does not know which method runs.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "device/execution_context.h"
#include "engine/speculative_config.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace pagoda {

// One request of the step just verified, in the target's batch order.
struct ProposalRequest {
  const std::string* request_id = nullptr;
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
  // chunk short of the prompt's end).
  bool wants_drafts = false;
  // The request's blocks were (re)assigned this step (new, or resumed after preemption): of its
  // tokens only the first first_position (the prefix-cache hit) are in any cache. A proposer
  // with a cache of its own starts over from there.
  bool readmitted = false;
  // The request's sampling temperature (0: greedy) and seed, for a proposer that samples its
  // drafts (draft_model).
  float temperature = 0.0f;
  uint64_t seed = 0;
  // Out, for a proposer that samples its drafts from a distribution q rather than choosing them
  // deterministically: q at each draft, [drafts, vocab], appended after the runner clears it;
  // left empty for deterministic drafts. The rejection sampler verifies against it.
  std::vector<float>* draft_probs = nullptr;
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  // drafts[i] (resized to requests.size(), each cleared first) gets up to
  // num_speculative_tokens tokens for requests[i] where wants_drafts; runs right after the
  // target's forward pass of the step (whose hidden states a model-based proposer reads).
  virtual void propose(const ExecutionContext& ctx, std::span<const ProposalRequest> requests,
                       std::vector<std::vector<int32_t>>& drafts) = 0;
  // The request finished or was aborted: a proposer keeping per-request state drops it.
  virtual void remove_request(const std::string& /*request_id*/) {}
  // The target copied a block (copy-on-write of a forked prompt's last block): a proposer with
  // a cache of its own on the target's block tables copies its block too.
  virtual void copy_block(int32_t /*src_block_id*/, int32_t /*dst_block_id*/) {}
};

// The proposer `config.method` names, over the target model and its cache (mtp drafts with the
// model's MTP layer and writes that layer's cache); nullptr when speculation is off.
// draft_model runs `draft_model` over `draft_cache` (as many blocks, of the same size, as
// `cache`), both required for that method and outliving the proposer.
std::unique_ptr<Proposer> make_proposer(const SpeculativeConfig& config, Model& model,
                                        KvCache& cache, Model* draft_model = nullptr,
                                        KvCache* draft_cache = nullptr);

}  // namespace pagoda
