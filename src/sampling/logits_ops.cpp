// Row operations on logits for the sampler; see logits_ops.h for the semantics of each.
#include "sampling/logits_ops.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "sampling/fast_exp.h"

namespace pagoda {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Top-k values up to this k are found with a size-k heap in one pass over the row (no index
// array); larger k use nth_element over the candidate ids.
constexpr int kHeapTopKLimit = 256;

// Top-p partitions by mass until the range holding the cut is this small, then sorts it.
constexpr size_t kTopPSortRange = 64;

// Orders ids by logit descending, ties by lower id first (a strict weak order; NaN never reaches
// it because candidates are filtered with `> -inf`).
struct HigherLogit {
  const float* logits;
  bool operator()(int32_t a, int32_t b) const {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  }
};

// Keeps the ids whose logit is >= threshold, preserving their order.
void keep_at_least(const float* logits, std::vector<int32_t>& ids, float threshold) {
  ids.erase(std::remove_if(ids.begin(), ids.end(),
                           [&](int32_t id) { return !(logits[id] >= threshold); }),
            ids.end());
}

// The k-th largest finite logit of the whole row (or the smallest finite one when fewer than k
// are finite), by a min-heap of k values.
float kth_largest_by_heap(const float* logits, int64_t vocab_size, int k,
                          std::vector<float>& heap) {
  heap.clear();
  const auto cmp = std::greater<float>();  // min-heap: front() is the smallest kept value
  for (int64_t i = 0; i < vocab_size; ++i) {
    const float v = logits[i];
    if (!(v > kNegInf)) continue;
    if (heap.size() < static_cast<size_t>(k)) {
      heap.push_back(v);
      std::push_heap(heap.begin(), heap.end(), cmp);
    } else if (v > heap.front()) {
      std::pop_heap(heap.begin(), heap.end(), cmp);
      heap.back() = v;
      std::push_heap(heap.begin(), heap.end(), cmp);
    }
  }
  return heap.empty() ? kNegInf : heap.front();
}

// The inverse-CDF scan of a whole row works per block: block sums (fast, independent
// accumulators) locate the block that crosses the target, and only that block is scanned token by
// token.
constexpr int64_t kScanBlock = 1024;

double blocked_sum(const float* weights, int64_t n) {
  double total = 0.0;
  for (int64_t start = 0; start < n; start += kScanBlock) {
    total += sum_floats(weights + start, std::min(kScanBlock, n - start));
  }
  return total;
}

// The first index where the running sum of weights exceeds target (target < blocked_sum, so the
// block level always finds its block: it adds the same block sums in the same order).
int64_t invert_cdf(const float* weights, int64_t n, double target) {
  double cumulative = 0.0;
  for (int64_t start = 0; start < n; start += kScanBlock) {
    const int64_t end = std::min(start + kScanBlock, n);
    const double block_sum = sum_floats(weights + start, end - start);
    if (cumulative + block_sum > target) {
      for (int64_t i = start; i < end; ++i) {
        cumulative += weights[i];
        if (cumulative > target) return i;
      }
      // Token-by-token rounding fell short of the block sum: the block's last token with mass.
      for (int64_t i = end - 1; i >= start; --i) {
        if (weights[i] > 0.0f) return i;
      }
    }
    cumulative += block_sum;
  }
  for (int64_t i = n - 1; i >= 0; --i) {
    if (weights[i] > 0.0f) return i;
  }
  return -1;
}

// Cuts ids to the top-p head. Writes workspace.weights for every id it was given.
//
// A quickselect on probability mass instead of a sort: partition around a pivot; if the tokens
// above it already hold the remaining mass, the cut lies among them, otherwise all of them are kept
// and the cut lies below. Expected linear time even for a flat distribution where the head is
// most of the vocabulary; only the last small range is sorted to place the cut exactly.
// When known_total >= 0, workspace.weights already holds every id's weight and known_total is the
// mass of the whole distribution (ids may then omit tokens that rank below all of them).
void apply_top_p(const float* logits, float max_logit, float top_p, double known_total,
                 SamplingWorkspace& workspace) {
  std::vector<int32_t>& ids = workspace.ids;
  float* weights = workspace.weights.data();
  double total = 0.0;
  if (known_total >= 0.0) {
    total = known_total;
  } else if (ids.size() * 4 >= workspace.weights.size()) {
    // Most of the row survives: one vectorized pass over all of it beats a gather.
    exp_shifted(logits, max_logit, weights, static_cast<int64_t>(workspace.weights.size()));
    for (int32_t id : ids) total += weights[id];
  } else {
    for (int32_t id : ids) {
      weights[id] = exp_approx(logits[id] - max_logit);
      total += weights[id];
    }
  }
  const double target = static_cast<double>(top_p) * total;
  const HigherLogit higher{logits};
  // Invariant: ids[0, lo) all rank above ids[lo, hi), hold mass_before < target, and are kept;
  // ids[hi, end) are cut.
  size_t lo = 0;
  size_t hi = ids.size();
  double mass_before = 0.0;
  while (hi - lo > kTopPSortRange) {
    // Median of three: never the lowest of the range, so both sides shrink.
    int32_t a = ids[lo], b = ids[lo + (hi - lo) / 2], c = ids[hi - 1];
    if (higher(b, a)) std::swap(a, b);
    if (higher(c, b)) std::swap(b, c);
    if (higher(b, a)) std::swap(a, b);
    const int32_t pivot = b;
    const auto mid = std::partition(ids.begin() + lo, ids.begin() + hi,
                                    [&](int32_t id) { return !higher(pivot, id); });
    const auto m = static_cast<size_t>(mid - ids.begin());
    double mass_upper = 0.0;
    for (size_t j = lo; j < m; ++j) mass_upper += weights[ids[j]];
    if (mass_before + mass_upper >= target) {
      hi = m;
    } else {
      mass_before += mass_upper;
      lo = m;
    }
  }
  std::sort(ids.begin() + lo, ids.begin() + hi, higher);
  for (size_t j = lo; j < hi; ++j) {
    if (j > 0 && mass_before >= target) {  // the first token always stays
      hi = j;
      break;
    }
    mass_before += weights[ids[j]];
  }
  ids.resize(hi);
}

}  // namespace

void SamplingWorkspace::reserve(int64_t vocab_size) {
  const auto size = static_cast<size_t>(vocab_size);
  if (ids.capacity() < size) ids.reserve(size);
  if (weights.size() < size) weights.resize(size);
  if (heap.capacity() < static_cast<size_t>(kHeapTopKLimit)) heap.reserve(kHeapTopKLimit);
}

int32_t argmax_token(const float* logits, int64_t vocab_size) {
  int32_t best_id = 0;
  float best = kNegInf;
  for (int64_t i = 0; i < vocab_size; ++i) {
    if (logits[i] > best) {  // strict: the first maximum wins
      best = logits[i];
      best_id = static_cast<int32_t>(i);
    }
  }
  return best_id;
}

float max_logit(const float* logits, int64_t vocab_size) {
  float best = kNegInf;
  for (int64_t i = 0; i < vocab_size; ++i) best = logits[i] > best ? logits[i] : best;
  return best;
}

double log_sum_exp(const float* logits, int64_t vocab_size) {
  const float max = max_logit(logits, vocab_size);
  if (!(max > kNegInf)) return static_cast<double>(max);
  constexpr int64_t kBlock = 512;  // exps of one block on the stack, then summed
  float block[kBlock];
  double sum = 0.0;
  for (int64_t start = 0; start < vocab_size; start += kBlock) {
    const int64_t n = std::min(kBlock, vocab_size - start);
    exp_shifted(logits + start, max, block, n);
    sum += sum_floats(block, n);
  }
  return static_cast<double>(max) + std::log(sum);
}

void top_n_tokens(const float* logits, int64_t vocab_size, int num_top, std::vector<int32_t>& out) {
  out.clear();
  if (num_top <= 0) return;
  const HigherLogit higher{logits};
  // A heap ordered so that front() is the worst kept id; ids arrive in increasing order, so an
  // equal logit never displaces an earlier id.
  for (int64_t i = 0; i < vocab_size; ++i) {
    const auto id = static_cast<int32_t>(i);
    if (std::isnan(logits[id])) continue;
    if (out.size() < static_cast<size_t>(num_top)) {
      out.push_back(id);
      std::push_heap(out.begin(), out.end(), higher);
    } else if (higher(id, out.front())) {
      std::pop_heap(out.begin(), out.end(), higher);
      out.back() = id;
      std::push_heap(out.begin(), out.end(), higher);
    }
  }
  std::sort(out.begin(), out.end(), higher);
}

Candidates truncate_logits(const float* logits, int64_t vocab_size, const TruncationParams& params,
                           SamplingWorkspace& workspace) {
  Candidates result;
  result.max_logit = max_logit(logits, vocab_size);
  const bool use_min_p = params.min_p > 0.0f;
  const bool use_top_k = params.top_k > 0 && params.top_k < vocab_size;
  const bool use_top_p = params.top_p < 1.0f;
  if (!use_min_p && !use_top_k && !use_top_p) return result;

  workspace.reserve(vocab_size);
  std::vector<int32_t>& ids = workspace.ids;
  ids.clear();
  bool top_k_done = false;
  double top_p_total = -1.0;  // set when the top-p-only path already summed the row
  if (use_min_p) {
    // p_i / p_max = exp(l_i - l_max) >= min_p, written in the log domain.
    const float threshold = result.max_logit + std::log(params.min_p);
    for (int64_t i = 0; i < vocab_size; ++i) {
      if (logits[i] >= threshold && logits[i] > kNegInf) ids.push_back(static_cast<int32_t>(i));
    }
  } else if (use_top_k && params.top_k <= kHeapTopKLimit) {
    const float kth = kth_largest_by_heap(logits, vocab_size, params.top_k, workspace.heap);
    for (int64_t i = 0; i < vocab_size; ++i) {
      if (logits[i] >= kth && logits[i] > kNegInf) ids.push_back(static_cast<int32_t>(i));
    }
    top_k_done = true;
  } else if (use_top_p && !use_top_k) {
    // Top-p alone. A token whose weight is below floor = (1 - top_p) * total / vocab_size is
    // always cut: it and every token below it hold less than vocab_size * floor, i.e. at most
    // the 1 - top_p tail. Skipping them leaves only the head for the selection when the row is
    // peaked (half the floor, so rounding never drops a survivor).
    float* weights = workspace.weights.data();
    exp_shifted(logits, result.max_logit, weights, vocab_size);
    top_p_total = blocked_sum(weights, vocab_size);
    const auto floor = static_cast<float>(0.5 * (1.0 - params.top_p) * top_p_total /
                                          static_cast<double>(vocab_size));
    for (int64_t i = 0; i < vocab_size; ++i) {
      if (weights[i] > 0.0f && weights[i] >= floor) ids.push_back(static_cast<int32_t>(i));
    }
  } else {
    for (int64_t i = 0; i < vocab_size; ++i) {
      if (logits[i] > kNegInf) ids.push_back(static_cast<int32_t>(i));
    }
  }

  if (use_top_k && !top_k_done && ids.size() > static_cast<size_t>(params.top_k)) {
    const auto kth_pos = ids.begin() + (params.top_k - 1);
    std::nth_element(ids.begin(), kth_pos, ids.end(), HigherLogit{logits});
    keep_at_least(logits, ids, logits[*kth_pos]);  // ties with the k-th stay, as in vLLM
  }

  if (use_top_p) {
    apply_top_p(logits, result.max_logit, params.top_p, top_p_total, workspace);
    result.weights_ready = true;
  }
  result.ids = std::span<const int32_t>(ids.data(), ids.size());
  result.all_tokens = false;
  return result;
}

int32_t draw_token(float* logits, int64_t vocab_size, const Candidates& candidates, double u,
                   SamplingWorkspace& workspace) {
  const float max = candidates.max_logit;
  if (!(max > kNegInf)) return -1;
  if (candidates.all_tokens) {
    exp_shifted(logits, max, logits, vocab_size);
    return static_cast<int32_t>(
        invert_cdf(logits, vocab_size, u * blocked_sum(logits, vocab_size)));
  }

  if (candidates.ids.empty()) return -1;
  float* weights = workspace.weights.data();
  double total = 0.0;
  for (int32_t id : candidates.ids) {
    if (!candidates.weights_ready) weights[id] = exp_approx(logits[id] - max);
    total += weights[id];
  }
  const double target = u * total;
  double cumulative = 0.0;
  for (int32_t id : candidates.ids) {
    cumulative += weights[id];
    if (cumulative > target) return id;
  }
  return candidates.ids.back();
}

}  // namespace pagoda
