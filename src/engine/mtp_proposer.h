// The MTP proposer (vLLM's method "mtp", formerly "deepseek_mtp"): DeepSeek-V3's
// multi-token-prediction layer drafts each request's next tokens from the target's last hidden
// states. Every step it runs the layer over the positions the target kept, pairing the hidden
// state at position i with the token at i + 1, so the layer's own cache layer follows the
// request like the decoder's; the last pair yields draft 1. Draft j > 1 feeds draft j - 1 and
// the layer's own output back in at the next position, as vLLM reuses V3's single MTP layer.
// Drafts are the layer's argmax (a point mass for the rejection sampler).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/proposer.h"

namespace pagoda {

// Throws pagoda::Error when `model` has no MTP layers loaded, saying method "mtp" needs them.
// The engine calls it once the model loads, so the error comes before the KV cache is sized.
void check_mtp_model(const Model& model);

class MtpProposer final : public Proposer {
 public:
  // Throws pagoda::Error when `model` has no MTP layers loaded.
  MtpProposer(const SpeculativeConfig& config, Model& model, KvCache& cache);

  void propose(const ExecutionContext& ctx, std::span<const ProposalRequest> requests,
               std::vector<std::vector<int32_t>>& drafts) override;

 private:
  // Appends one sequence of `num` positions from `first` to batch_ (the next token of each as
  // input); returns its first row.
  void add_sequence(const ProposalRequest& r, int32_t first, int32_t num, bool needs_logits,
                    std::span<const int32_t> input_ids);
  // Runs the layer over batch_ with previous_ as its hidden input: logits_ and output_ filled.
  void run(const ExecutionContext& ctx);

  int32_t num_speculative_tokens_;
  Model& model_;
  KvCache& cache_;
  int64_t hidden_ = 0;
  ForwardBatch batch_;
  std::vector<float> previous_;  // [T, hidden] the hidden state each row continues from
  std::vector<float> output_;    // [T, hidden] the layer's output
  std::vector<float> logits_;    // [drafting requests, vocab]
  // Per drafting request: its index in the step, and its last position and output row.
  struct Drafting {
    size_t index = 0;
    int32_t position = 0;
    std::vector<float> hidden;  // [hidden] the layer's output at `position`
  };
  std::vector<Drafting> drafting_;
  std::vector<int32_t> inputs_;
};

}  // namespace pagoda
