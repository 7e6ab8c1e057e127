// The draft-model proposer (vLLM's method "draft_model"): a second, smaller model with the
// target's tokenizer runs k autoregressive steps per request and step, batched across requests,
// and its drafts are verified by the target in the request's next step. Greedy requests get the
// draft's argmax; sampled requests (temperature > 0) get a token drawn from the draft's
// softmax(logits / temperature), whose distribution goes to the rejection sampler so the output
// stays distributed exactly as the target's.
//
// The draft's paged KV cache has as many blocks as the target's and uses the target's block
// tables, so a block holds the same positions in both: prefix-cache hits, copy-on-write and
// preemption need no bookkeeping of their own. Each step the draft first computes the tokens
// the target computed (prompt chunks, accepted drafts, the sampled token), then drafts. KV it
// wrote for drafts the target rejected is recomputed: per request the proposer remembers the
// tokens its cache holds and keeps only the prefix that agrees with the request's tokens.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "device/execution_context.h"
#include "engine/proposer.h"
#include "model/forward_batch.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "sampling/rng.h"

namespace pagoda {

class DraftModelProposer final : public Proposer {
 public:
  // `model` and `cache` (as many blocks and the same block size as the target's) must outlive
  // the proposer.
  DraftModelProposer(Model& model, KvCache& cache, int32_t num_speculative_tokens);

  // Runs on its own host context (the draft's forward passes), not the target's `ctx`.
  void propose(const ExecutionContext& ctx, std::span<const ProposalRequest> requests,
               std::vector<std::vector<int32_t>>& drafts) override;
  void remove_request(const std::string& request_id) override { states_.erase(request_id); }
  void copy_block(int32_t src_block_id, int32_t dst_block_id) override {
    cache_.copy_block(src_block_id, dst_block_id);
  }

 private:
  struct State {
    std::vector<int32_t> cached;  // the tokens whose draft KV is at positions 0, 1, ...
    SamplingRng rng{0};
  };
  // One sequence of the next draft forward: `request`, feeding `tokens` at positions from
  // `start`.
  void add_sequence(const ProposalRequest& request, int32_t start, std::span<const int32_t> tokens,
                    bool needs_logits);
  // Chooses `request`'s next draft from the logits row `row`.
  int32_t choose(const ProposalRequest& request, State& state, const float* row);

  Model& model_;
  KvCache& cache_;
  int32_t num_speculative_tokens_;
  ExecutionContext context_;
  std::unordered_map<std::string, State> states_;
  ForwardBatch batch_;
  std::vector<float> logits_;
  std::vector<double> weights_;  // softmax scratch for sampled drafts
};

}  // namespace pagoda
