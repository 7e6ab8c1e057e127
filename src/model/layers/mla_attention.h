// Multi-head Latent Attention (DeepSeek-V2, arXiv:2405.04434 §2.1) in the weight-absorbed form,
// over the paged latent cache (kernels/mla_attention.h):
//   q = q_b(norm(q_a(x))) | q_proj(x)            [T, H, nope + rope]
//   c, k_pe = split(kv_a_proj_with_mqa(x))       [T, kv_lora], [T, rope] (k_pe shared by heads)
//   latent = [norm(c) | rope(k_pe)] -> cache      only these values per token are stored
//   out = o_proj(W_uv · attention(W_uk^T q_nope | rope(q_pe), latent))
// kv_b_proj's rows per head are [W_uk (nope) | W_uv (v)], each [., kv_lora]. Since
// q_nope·(W_uk c) = (W_uk^T q_nope)·c, each head's query moves into the latent space once and
// attends over the cached latents directly; sum_j p_j (W_uv c_j) = W_uv (sum_j p_j c_j) is
// up-projected once after the softmax. That form costs 2 x (kv_lora + rope + kv_lora) flops per
// (query, context token, head) — 2,176 at V2-Lite's shape — against 2 x (nope + rope + v) = 640
// for plain multi-head attention over expanded K/V. So a sequence with many new tokens in a step
// (a long prefill chunk) takes the expanded form instead: its whole context's latents are
// decompressed through kv_b_proj once per step into per-head K = [W_uk c | k_pe] and V = W_uv c,
// and the dense prefill tiles attend over them (kernels/attention.h). The expansion costs
// 2 x kv_lora x H x (nope + v) flops per context token and saves the absorption and
// up-projection of every new token, which is why the choice is a count of new tokens
// (ModelOptions::mla_expanded_min_tokens, docs/deepseek.md) and not of context.
// The rope dims of q/k are stored interleaved (pairs 2i, 2i+1): HF de-interleaves and then
// rotates halves, which is the same rotation as rotating adjacent pairs in place.
// Tensor parallel: each rank holds H/T heads — their rows of q_b_proj (or q_proj) and kv_b_proj,
// their columns of o_proj (row-parallel, summed over the group) — while q_a_proj,
// kv_a_proj_with_mqa and the latent cache are whole on every rank: every head attends over the
// whole latent of every token, so a cache split by latent dims would need the heads' partial
// scores summed over the ranks before each softmax (docs/parallel.md).
#pragma once

#include <climits>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "device/execution_context.h"
#include "kernels/attention.h"
#include "model/deepseek_config.h"
#include "model/layers/activation.h"
#include "model/layers/attention_batch.h"
#include "model/layers/linear.h"
#include "model/layers/rms_norm.h"
#include "model/layers/rotary_embedding.h"
#include "model/layers/row_parallel_linear.h"
#include "model/tensor_parallel.h"

namespace pagoda {

class WeightLoader;

class MlaAttention {
 public:
  // The intermediate tensors of one layer's attention, shared by every layer of a model.
  class Activations {
   public:
    // `num_heads`: the heads of this rank.
    void reserve(const ExecutionContext& ctx, const DeepseekConfig& c, int64_t num_heads,
                 int64_t num_tokens);

   private:
    friend class MlaAttention;
    bool shaped_ = false;
    Activation q_a_;       // [T, q_lora]
    Activation q_;         // [T, H * qhd]
    Activation kv_a_;      // [T, kv_lora + rope]
    Activation latent_;    // [T, kv_lora + rope] what goes into the cache
    Activation q_nope_;    // [H, T, nope] per-head contiguous copies (T rows of H * nope)
    Activation q_abs_;     // [T, H, kv_lora + rope]
    Activation ctx_;       // [T, H, kv_lora] attention output in the latent space
    Activation ctx_head_;  // [H, T, kv_lora]
    Activation attn_;      // [T, H, v]
    // The expanded form (attend_expanded), for the C context positions of its sequences and
    // one group of G heads at a time.
    Activation exp_latent_;  // [C, kv_lora] the cached latents, widened to fp32
    Activation exp_k_pe_;    // [C, rope] the cached rotated k_pe
    Activation exp_kv_;      // [C, G, nope + v] kv_b_proj of the latents
    Activation exp_k_;       // [blocks, G, kExpandedBlockSize, nope + rope]: a paged K layer
    Activation exp_v_;       // [blocks, G, kExpandedBlockSize, v] and its V
    Activation exp_q_;       // [tokens, G, nope + rope] the group's queries
    Activation exp_out_;     // [tokens, G, v] and their attention outputs
    std::vector<int32_t> exp_block_ids_;       // 0, 1, 2, ...: the layer's block tables
    std::vector<AttentionSequence> exp_seqs_;  // the sequences over exp_q_ and that layer
    std::vector<int64_t> exp_first_position_;  // each one's first row of exp_latent_
    std::vector<AttentionSequence> absorbed_;  // this step's sequences in each form
    std::vector<AttentionSequence> expanded_;
  };

  // When a sequence takes the expanded form: ModelOptions::mla_expanded_min_tokens and
  // mla_expanded_scratch_bytes.
  struct ExpandedForm {
    int32_t min_tokens = INT32_MAX;
    int64_t scratch_bytes = 0;
  };

  MlaAttention() = default;
  // The attention weights under `prefix` ("model.layers.N.self_attn."): q_proj or q_a_proj /
  // q_a_layernorm / q_b_proj, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj (or GGUF's k_b_proj
  // and v_b_proj), o_proj; this rank's heads of them under `tp` (all of them on one rank). Throws
  // Error when the heads do not split over the group, or o_proj's columns over its
  // quantization groups.
  // `expanded`: when sequences take the expanded form; never with GGUF's k_b_proj and v_b_proj,
  // which hold no W_uk in the expanding direction.
  MlaAttention(WeightLoader& loader, const std::string& prefix, const DeepseekConfig& c,
               const TensorParallel& tp, ExpandedForm expanded);

  int64_t num_heads() const { return num_heads_; }

  // x [T, hidden] -> out [T, hidden] (out may be x: x is read first); writes the tokens' latent
  // rows into `cache`. `rope` holds this pass's cos/sin rows (interleaved pairing).
  void forward(const ExecutionContext& ctx, const float* x, const RotaryRows& rope,
               const PagedKvLayer& cache, const AttentionBatch& batch, Activations& a,
               float* out) const;

 private:
  // Whether a sequence with this many new tokens in a step takes the expanded form.
  bool expands(int32_t num_new_tokens) const {
    return kv_b_.data != nullptr && num_new_tokens >= expanded_.min_tokens;
  }
  // The absorbed form for `seqs`, whose tokens lie in rows [first_row, end_row) of the batch:
  // writes their rows of a.attn_ (and may write the other rows of that range too).
  void attend_absorbed(const ExecutionContext& ctx, const PagedKvLayer& cache,
                       std::span<const AttentionSequence> seqs, int64_t num_tokens,
                       int64_t first_row, int64_t end_row, Activations& a) const;
  // The expanded form for `seqs`: writes their rows of a.attn_. Reads q [T, H, nope + rope]
  // with the rope part rotated, and the context's latents from `cache`.
  void attend_expanded(const ExecutionContext& ctx, const PagedKvLayer& cache,
                       std::span<const AttentionSequence> seqs, Activations& a) const;

  // The shape of this layer, copied from the config; num_heads_ is this rank's.
  int64_t num_heads_ = 0, q_head_dim_ = 0, nope_ = 0, rope_dim_ = 0, rank_ = 0, v_dim_ = 0;
  float softmax_scale_ = 1.0f;
  bool q_lora_ = false;  // queries through q_a / q_b (V2, V3) rather than q_proj (V2-Lite)

  Linear q_proj_;      // [H*qhd, hidden]   (q_lora_rank == 0)
  Linear q_a_;         // [q_lora, hidden]  (q_lora_rank > 0)
  RmsNorm q_a_norm_;   // [q_lora]
  Linear q_b_;         // [H*qhd, q_lora]
  Linear kv_a_;        // [kv_lora + rope, hidden]
  RmsNorm kv_a_norm_;  // [kv_lora] (the latent only; k_pe is not normalised)
  // [H] [kv_lora, nope]: W_uk^T, transposed at load into memory the loader holds, or k_b_proj
  std::vector<Linear> w_uk_t_;
  std::vector<Linear> w_uv_;  // [H] [v, kv_lora] into kv_b_proj or v_b_proj
  RowParallelLinear o_;       // [hidden, H*v]
  WeightView kv_b_;  // [H * (nope + v), kv_lora] as stored, or none (k_b_proj / v_b_proj)
  ExpandedForm expanded_;
};

}  // namespace pagoda
