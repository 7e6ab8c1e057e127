// The router and the grouped expert dispatch; see moe.h for the semantics and their source.
#include "model/layers/moe.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/ops.h"
#include "model/layers/row_parallel_linear.h"

namespace pagoda {
namespace {

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
// Below this many gathered rows the copies stay on the calling thread (a decode step's few
// rows cost less than a fork/join).
constexpr int64_t kSerialRows = 32;

// Index of the largest value among `n` entries not yet taken (lowest index on ties).
int32_t argmax_untaken(const float* values, const bool* taken, int32_t n) {
  int32_t best = -1;
  float best_value = kMinusInf;
  for (int32_t i = 0; i < n; ++i) {
    if (taken[i]) continue;
    if (best < 0 || values[i] > best_value) {
      best = i;
      best_value = values[i];
    }
  }
  return best;
}

}  // namespace

void route_token(const MoeRouterConfig& c, const float* logits, const float* bias, float* scratch,
                 int32_t* expert_ids, float* weights) {
  const int32_t num_experts = c.num_experts;
  float* scores = scratch;                          // [E] the weights come from these
  float* choice = scratch + num_experts;            // [E] experts are chosen by these
  float* group_scores = scratch + 2 * num_experts;  // [groups]

  if (c.scoring == MoeScoring::kSoftmax) {
    float max_logit = kMinusInf;
    for (int32_t e = 0; e < num_experts; ++e) max_logit = std::max(max_logit, logits[e]);
    float sum = 0.0f;
    for (int32_t e = 0; e < num_experts; ++e) {
      scores[e] = std::exp(logits[e] - max_logit);
      sum += scores[e];
    }
    for (int32_t e = 0; e < num_experts; ++e) scores[e] /= sum;
  } else {
    for (int32_t e = 0; e < num_experts; ++e) scores[e] = 1.0f / (1.0f + std::exp(-logits[e]));
  }
  // The bias only steers which experts are chosen (noaux_tc); the weights stay raw scores.
  const bool use_bias = c.method == MoeTopkMethod::kNoauxTc && bias != nullptr;
  for (int32_t e = 0; e < num_experts; ++e) choice[e] = use_bias ? scores[e] + bias[e] : scores[e];

  if (c.method != MoeTopkMethod::kGreedy && c.num_groups > 1) {
    const int32_t group_size = num_experts / c.num_groups;
    for (int32_t g = 0; g < c.num_groups; ++g) {
      const float* v = choice + g * group_size;
      if (c.method == MoeTopkMethod::kGroupLimitedGreedy) {
        // V2: a group is as good as its best expert.
        group_scores[g] = *std::max_element(v, v + group_size);
      } else {
        // V3: a group is as good as the sum of its two best (bias-corrected) experts.
        float first = kMinusInf, second = kMinusInf;
        for (int32_t i = 0; i < group_size; ++i) {
          if (v[i] > first) {
            second = first;
            first = v[i];
          } else if (v[i] > second) {
            second = v[i];
          }
        }
        group_scores[g] = first + second;
      }
    }
    // Keep the topk_group best groups; every expert of the others becomes unchoosable.
    bool group_taken[256] = {};
    bool group_kept[256] = {};
    const int32_t num_groups = std::min<int32_t>(c.num_groups, 256);
    for (int32_t k = 0; k < c.topk_groups; ++k) {
      const int32_t g = argmax_untaken(group_scores, group_taken, num_groups);
      group_taken[g] = true;
      group_kept[g] = true;
    }
    for (int32_t g = 0; g < num_groups; ++g) {
      if (group_kept[g]) continue;
      for (int32_t i = 0; i < group_size; ++i) choice[g * group_size + i] = kMinusInf;
    }
  }

  // top_k of the choice scores. `taken` marks chosen experts and, via -inf, excluded ones.
  bool taken[1024] = {};
  for (int32_t k = 0; k < c.top_k; ++k) {
    int32_t best = -1;
    float best_value = kMinusInf;
    for (int32_t e = 0; e < num_experts; ++e) {
      if (taken[e] || choice[e] == kMinusInf) continue;
      if (best < 0 || choice[e] > best_value) {
        best = e;
        best_value = choice[e];
      }
    }
    taken[best] = true;
  }
  int32_t k = 0;
  float sum = 0.0f;
  for (int32_t e = 0; e < num_experts; ++e) {
    if (!taken[e]) continue;
    expert_ids[k] = e;
    weights[k] = scores[e];
    sum += scores[e];
    ++k;
  }
  const bool normalise = c.top_k > 1 && c.norm_topk_prob;
  if (normalise) {
    for (int32_t i = 0; i < c.top_k; ++i) weights[i] /= (sum + 1e-20f);
  }
  if (c.scale_after_norm || !normalise) {
    for (int32_t i = 0; i < c.top_k; ++i) weights[i] *= c.routed_scaling_factor;
  }
}

void MoeDispatcher::reserve(const ExecutionContext& ctx, const MoeRouterConfig& c, int64_t hidden,
                            int64_t inter, int64_t shared_inter, int64_t max_tokens) {
  // Layers of one model may differ (a dense first layer's wider inter, V3's groups), so every
  // buffer only ever grows to what the largest caller needs.
  hidden_ = hidden;  // one model, one hidden size
  max_inter_ = std::max({max_inter_, inter, shared_inter});
  capacity_ = std::max(capacity_, max_tokens);
  const auto n = static_cast<size_t>(capacity_);
  const auto grow = [](auto& buffer, size_t size) {
    if (buffer.size() < size) buffer.resize(size);
  };
  // Rows of at least `row_size` floats for every token of the capacity.
  const auto grow_rows = [&](Activation& buffer, int64_t row_size) {
    if (buffer.row_size() < row_size) buffer.set_row_size(row_size);
    buffer.reserve(ctx, capacity_);
  };
  grow_rows(logits_, c.num_experts);
  grow_rows(route_scratch_, 2 * c.num_experts + c.num_groups);
  grow(expert_ids_, n * c.top_k);
  grow(route_weights_, n * c.top_k);
  grow(expert_offsets_, static_cast<size_t>(c.num_experts) + 1);
  grow(expert_cursor_, static_cast<size_t>(c.num_experts));
  grow(expert_rows_, n * c.top_k);
  grow(expert_row_weights_, n * c.top_k);
  grow_rows(gathered_, hidden_);
  grow_rows(gate_, max_inter_);
  grow_rows(up_, max_inter_);
  grow_rows(expert_out_, hidden_);
}

void MoeDispatcher::forward(const ExecutionContext& ctx, const MoeRouterConfig& c,
                            const MoeWeights& w, const float* x, int64_t num_tokens, float* out) {
  const int64_t T = num_tokens;
  const int32_t E = c.num_experts;
  const int32_t K = c.top_k;
  reserve(ctx, c, w.router.cols, w.experts.empty() ? 0 : w.experts[0].gate.rows,
          w.has_shared ? w.shared.gate.rows : 0, T);

  // Router logits in fp32 (HF casts both operands to fp32 for the gate).
  ops::matmul(ctx.kernels(), x, T, w.router, logits_.data(), E);  // [T, E]
  const float* bias = w.score_bias.empty() ? nullptr : w.score_bias.data();
  const int64_t scratch_per_token = 2 * E + c.num_groups;
  ctx.threads().parallel_for(
      T,
      [&](int64_t t) {
        route_token(c, logits_.data() + t * E, bias, route_scratch_.data() + t * scratch_per_token,
                    &expert_ids_[static_cast<size_t>(t * K)],
                    &route_weights_[static_cast<size_t>(t * K)]);
      },
      /*serial_up_to=*/16);

  // Counting sort of (token, slot) pairs by expert: tokens stay in ascending order within an
  // expert, so each token's sum below runs over its experts in ascending id order whatever
  // else is in the batch (a request's output does not depend on its neighbours).
  std::fill(expert_offsets_.begin(), expert_offsets_.end(), 0);
  for (int64_t i = 0; i < T * K; ++i)
    ++expert_offsets_[static_cast<size_t>(expert_ids_[static_cast<size_t>(i)]) + 1];
  for (int32_t e = 0; e < E; ++e) expert_offsets_[e + 1] += expert_offsets_[e];
  {
    std::copy(expert_offsets_.begin(), expert_offsets_.end() - 1, expert_cursor_.begin());
    int32_t* cursor = expert_cursor_.data();
    for (int64_t t = 0; t < T; ++t) {
      for (int32_t k = 0; k < K; ++k) {
        const int32_t e = expert_ids_[static_cast<size_t>(t * K + k)];
        const int32_t slot = cursor[e]++;
        expert_rows_[static_cast<size_t>(slot)] = static_cast<int32_t>(t);
        expert_row_weights_[static_cast<size_t>(slot)] =
            route_weights_[static_cast<size_t>(t * K + k)];
      }
    }
  }

  // Every expert of this rank with tokens, in ascending id order, then the shared MLP over all
  // tokens: each token's sum runs over its experts in that order whatever else is in the batch.
  groups_.clear();
  const auto num_local = static_cast<int32_t>(w.experts.size());
  for (int32_t e = w.first_expert; e < w.first_expert + num_local; ++e) {
    const int32_t n = expert_offsets_[e + 1] - expert_offsets_[e];
    if (n > 0) {
      groups_.push_back(
          {&w.experts[static_cast<size_t>(e - w.first_expert)], expert_offsets_[e], n});
    }
  }
  last_num_routed_experts_ = static_cast<int32_t>(groups_.size());
  if (w.has_shared) groups_.push_back({&w.shared, -1, static_cast<int32_t>(T)});

  // Groups run in chunks of up to capacity_ rows: a decode step's experts all in one chunk, so
  // a layer costs two parallel regions (gate/up, then down) rather than three per expert.
  std::fill(out, out + T * hidden_, 0.0f);
  for (size_t first = 0; first < groups_.size();) {
    size_t last = first + 1;
    int64_t rows = groups_[first].num_rows;
    while (last < groups_.size() && rows + groups_[last].num_rows <= capacity_) {
      rows += groups_[last++].num_rows;
    }
    run_groups(ctx, first, last, x);
    scatter_groups(ctx.threads(), first, last, out);
    first = last;
  }
  reduce_partial_sums(w.reduce, out, T, hidden_);
}

void MoeDispatcher::run_groups(const ExecutionContext& ctx, size_t first, size_t last,
                               const float* x) {
  const KernelTable& k = ctx.kernels();
  // Gather each expert's tokens into contiguous rows (its weights are then read once for all
  // of them) and lay the groups' gate/up/output rows end to end. The routed groups' slots are
  // one run of expert_rows_ (ascending experts), in the order of the gathered rows; the copies
  // are split across the threads (on one thread they were ~2% of a 128-token layer's wall
  // time with the other thread idle).
  int64_t num_gathered = 0;
  for (size_t i = first; i < last; ++i) {
    if (groups_[i].slot_begin >= 0) num_gathered += groups_[i].num_rows;
  }
  if (num_gathered > 0) {
    const int32_t* tokens = expert_rows_.data() + groups_[first].slot_begin;
    float* gathered = gathered_.data();
    ctx.threads().parallel_for(
        num_gathered,
        [&](int64_t r) {
          std::copy(x + tokens[r] * hidden_, x + (tokens[r] + 1) * hidden_, gathered + r * hidden_);
        },
        /*serial_up_to=*/kSerialRows);
  }
  jobs_.clear();
  int64_t row = 0, inter_offset = 0;
  for (size_t i = first; i < last; ++i) {
    ExpertGroup& g = groups_[i];
    const int64_t inter = g.mlp->gate.rows;
    // The shared MLP reads every token as it is.
    const float* input = g.slot_begin >= 0 ? gathered_.data() + row * hidden_ : x;
    g.gate = gate_.data() + inter_offset;
    g.up = up_.data() + inter_offset;
    g.output = expert_out_.data() + row * hidden_;
    jobs_.push_back({input, g.num_rows, &g.mlp->gate, g.gate, inter});
    jobs_.push_back({input, g.num_rows, &g.mlp->up, g.up, inter});
    row += g.num_rows;
    inter_offset += g.num_rows * inter;
  }
  ops::matmul_batch(k, jobs_);
  ops::silu_mul(k, gate_.data(), up_.data(), inter_offset, gate_.data());
  jobs_.clear();
  for (size_t i = first; i < last; ++i) {
    const ExpertGroup& g = groups_[i];
    jobs_.push_back({g.gate, g.num_rows, &g.mlp->down, g.output, hidden_});
  }
  ops::matmul_batch(k, jobs_);
}

void MoeDispatcher::scatter_groups(const ThreadPool& threads, size_t first, size_t last,
                                   float* out) const {
  // The threads split the hidden columns, each adding every group in order over its columns:
  // each output element sees the same additions in the same order as on one thread.
  int64_t rows = 0;
  for (size_t i = first; i < last; ++i) rows += groups_[i].num_rows;
  // Four slices per thread, each a multiple of 8 columns (2048 on 2 threads: 8 of 256).
  const int64_t per_slice = std::max<int64_t>(
      8,
      ((hidden_ + 4 * threads.num_threads() - 1) / (4 * threads.num_threads()) + 7) & ~int64_t{7});
  const int64_t num_slices = (hidden_ + per_slice - 1) / per_slice;
  threads.parallel_for(
      num_slices,
      [&](int64_t slice) {
        const int64_t begin = slice * per_slice;
        const int64_t end = std::min(hidden_, begin + per_slice);
        for (size_t i = first; i < last; ++i) {
          const ExpertGroup& g = groups_[i];
          for (int32_t r = 0; r < g.num_rows; ++r) {
            // The shared MLP: every token in order, weight 1.
            const bool shared = g.slot_begin < 0;
            const size_t slot = static_cast<size_t>(g.slot_begin + r);
            const int64_t t = shared ? r : expert_rows_[slot];
            const float* src = g.output + r * hidden_;
            float* dst = out + t * hidden_;
            if (shared) {
              for (int64_t j = begin; j < end; ++j) dst[j] += src[j];
            } else {
              const float weight = expert_row_weights_[slot];
              for (int64_t j = begin; j < end; ++j) dst[j] += weight * src[j];
            }
          }
        }
      },
      /*serial_up_to=*/rows < kSerialRows ? num_slices : 0);
}

}  // namespace pagoda
