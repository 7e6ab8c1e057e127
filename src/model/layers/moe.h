// DeepSeek's mixture of experts: the router (softmax or sigmoid scores, optional bias
// correction, greedy / group-limited / noaux_tc top-k, normalisation, routed scaling) and an
// expert dispatch that gathers the batch's tokens by expert, so each expert's weights are
// streamed from memory once per step for all the tokens routed to it.
//
// Semantics follow MoEGate / DeepseekV2MoE / DeepseekV3MoE of the published
// modeling_deepseek.py:
//   scores  = softmax(logits) | sigmoid(logits)                       [T, E], fp32
//   choice  = scores (+ e_score_correction_bias for noaux_tc)
//   groups  = top topk_group groups by max(choice) (V2) | sum of top-2 choice (V3)
//   experts = top_k of choice within those groups; weight = scores[expert] (never the bias)
//   weights /= sum(weights) if norm_topk_prob and top_k > 1; weights *= routed_scaling_factor
//   y = sum_k weight_k * expert_k(x) + shared(x)
//
// Expert parallel: a rank holds E/T routed experts and a T-th of the shared MLP's intermediate
// rows. Every rank routes every token (the router is whole everywhere, and every rank's input
// is the same all-reduced hidden state, so the choices agree), runs its own experts on the
// tokens routed to them and its part of the shared MLP, and the sum over the ranks of these
// partial outputs is the layer's output: one all-reduce of [T, hidden] combines them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "device/execution_context.h"
#include "kernels/kernels.h"
#include "kernels/ops.h"
#include "model/deepseek_config.h"
#include "model/layers/activation.h"
#include "parallel/communicator.h"

namespace pagoda {

// One SwiGLU MLP: down(silu(gate(x)) * up(x)).
struct ExpertMlp {
  WeightView gate;  // [inter, hidden]
  WeightView up;    // [inter, hidden]
  WeightView down;  // [hidden, inter]
};

struct MoeWeights {
  WeightView router;                  // [num_experts, hidden] (mlp.gate.weight)
  std::span<const float> score_bias;  // [num_experts] e_score_correction_bias; empty if unused
  // This rank's routed experts, ids [first_expert, first_expert + experts.size()): all of them
  // on one rank.
  int32_t first_expert = 0;
  std::vector<ExpertMlp> experts;
  bool has_shared = false;
  // n_shared_experts fused into one MLP of n_shared x moe_inter rows (this rank's share of them).
  ExpertMlp shared;
  // Sums the ranks' partial outputs; nullptr on one rank.
  Communicator* reduce = nullptr;
};

// Routes one token. `logits` [num_experts]; `bias` [num_experts] or nullptr; `scratch` holds
// 2 * num_experts + num_groups floats. Writes top_k expert ids (ascending) and their weights.
void route_token(const MoeRouterConfig& config, const float* logits, const float* bias,
                 float* scratch, int32_t* expert_ids, float* weights);

// Runs MoE layers. Owns its scratch, sized once by reserve() and grown only if a larger batch
// ever arrives; forward() itself does not allocate after that. The float scratch (router logits,
// gathered tokens, expert activations) is activation memory of the context's device; the
// routing bookkeeping stays on the host.
class MoeDispatcher {
 public:
  void reserve(const ExecutionContext& ctx, const MoeRouterConfig& config, int64_t hidden,
               int64_t inter, int64_t shared_inter, int64_t max_tokens);

  // out[T, hidden] = MoE(x[T, hidden]), summed over the ranks of weights.reduce. `out` may not
  // alias `x`.
  void forward(const ExecutionContext& ctx, const MoeRouterConfig& config,
               const MoeWeights& weights, const float* x, int64_t num_tokens, float* out);

  // The routing decision of the last forward: [T, top_k] ids and weights (for tests).
  const std::vector<int32_t>& last_expert_ids() const { return expert_ids_; }
  const std::vector<float>& last_weights() const { return route_weights_; }
  // How many of this rank's routed experts the last forward ran (had at least one token): the
  // union over its tokens, so the expert weights it streamed were this many experts' worth.
  int32_t last_num_routed_experts() const { return last_num_routed_experts_; }

 private:
  // One MLP's share of a layer: a routed expert with its gathered tokens, or the shared MLP.
  struct ExpertGroup {
    const ExpertMlp* mlp = nullptr;
    int32_t slot_begin = -1;  // first of its (token, slot) pairs in expert_rows_; -1: shared
    int32_t num_rows = 0;
    float* gate = nullptr;    // [num_rows, inter] (silu(gate) * up after the first region)
    float* up = nullptr;      // [num_rows, inter]
    float* output = nullptr;  // [num_rows, hidden]
  };
  void run_groups(const ExecutionContext& ctx, size_t first, size_t last, const float* x);
  void scatter_groups(const ThreadPool& threads, size_t first, size_t last, float* out) const;

  int64_t hidden_ = 0;
  int64_t max_inter_ = 0;
  int64_t capacity_ = 0;
  int32_t last_num_routed_experts_ = 0;
  Activation logits_;                      // [T, E]
  Activation route_scratch_;               // [T, 2E + groups]
  std::vector<int32_t> expert_ids_;        // [T, top_k]
  std::vector<float> route_weights_;       // [T, top_k]
  std::vector<int32_t> expert_offsets_;    // [E + 1] counting sort of (token, slot) by expert
  std::vector<int32_t> expert_cursor_;     // [E] fill positions during the sort
  std::vector<int32_t> expert_rows_;       // [T * top_k] token index, grouped by expert
  std::vector<float> expert_row_weights_;  // [T * top_k]
  std::vector<ExpertGroup> groups_;        // this layer's experts with tokens, then shared
  std::vector<ops::MatmulJob> jobs_;
  Activation gathered_;    // [T, hidden] the tokens of one chunk of experts
  Activation gate_, up_;   // [T, inter] ditto
  Activation expert_out_;  // [T, hidden] ditto
};

}  // namespace pagoda
