// Sampler cost per token at DeepSeek vocabulary sizes: RequestSampler vs a naive version that
// sorts the whole vocabulary and rescans the history each step (what the fast paths avoid).
// Prints microseconds per token for both and their ratio, measured in the same run.
//   bench_sampler [vocab_size=152064] [num_steps=200]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "pagoda/sampling_params.h"
#include "sampling/sampler.h"

namespace {

using pagoda::RequestSampler;
using pagoda::SamplingParams;

// Twenty strong candidates, boosted by `boost`, over a normal tail. With boost 8 the tail holds
// most of the mass (a flat, high-entropy row: top-p must keep much of the vocabulary); with boost
// 16 the candidates dominate, as in a trained model's typical step.
std::vector<std::vector<float>> make_rows(int64_t vocab_size, int num_rows, float boost) {
  std::mt19937 gen(1);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<std::vector<float>> rows(num_rows, std::vector<float>(vocab_size));
  for (auto& row : rows) {
    for (float& l : row) l = normal(gen);
    for (int i = 0; i < 20; ++i) row[gen() % vocab_size] += boost;
  }
  return rows;
}

// The straightforward version: full sort, vLLM masks, softmax, history rescanned per step.
int32_t naive_sample(const SamplingParams& p, std::vector<float> logits,
                     const std::vector<int32_t>& prompt, const std::vector<int32_t>& output,
                     std::mt19937_64& gen) {
  const auto vocab_size = static_cast<int64_t>(logits.size());
  if (p.logprobs.has_value()) {  // raw log_softmax, as the real sampler returns
    const float max = *std::max_element(logits.begin(), logits.end());
    double total = 0.0;
    for (float l : logits) total += std::exp(l - max);
    volatile double log_normalizer = max + std::log(total);
    (void)log_normalizer;
  }
  std::vector<int32_t> counts(vocab_size, 0);
  std::vector<char> seen(vocab_size, 0);
  for (int32_t id : prompt) seen[id] = 1;
  for (int32_t id : output) seen[id] = 1, ++counts[id];
  for (int64_t i = 0; i < vocab_size; ++i) {
    if (seen[i])
      logits[i] =
          logits[i] > 0 ? logits[i] / p.repetition_penalty : logits[i] * p.repetition_penalty;
    logits[i] -= p.frequency_penalty * counts[i] + p.presence_penalty * (counts[i] > 0);
  }
  if (p.temperature == 0.0f) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  for (float& l : logits) l /= p.temperature;
  std::vector<int32_t> ids(vocab_size);
  std::iota(ids.begin(), ids.end(), 0);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  size_t n = ids.size();
  if (p.top_k > 0 && p.top_k < vocab_size) n = p.top_k;
  std::vector<double> probs(n);
  double total = 0.0;
  for (size_t j = 0; j < n; ++j) total += probs[j] = std::exp(logits[ids[j]] - logits[ids[0]]);
  double before = 0.0;
  size_t keep = 0;
  while (keep < n && (keep == 0 || before < p.top_p * total)) before += probs[keep++];
  const double u = std::uniform_real_distribution<double>(0.0, before)(gen);
  double cumulative = 0.0;
  for (size_t j = 0; j < keep; ++j) {
    cumulative += probs[j];
    if (cumulative > u) return ids[j];
  }
  return ids[keep - 1];
}

struct Scenario {
  std::string name;
  SamplingParams params;
};

}  // namespace

int main(int argc, char** argv) {
  const int64_t vocab_size = argc > 1 ? std::atoll(argv[1]) : 152064;
  const int num_steps = argc > 2 ? std::atoi(argv[2]) : 200;

  std::vector<int32_t> prompt(1000);
  std::mt19937 gen(2);
  for (int32_t& id : prompt) id = static_cast<int32_t>(gen() % vocab_size);

  std::vector<Scenario> scenarios;
  auto add = [&](std::string name, auto edit) {
    SamplingParams p;
    p.max_tokens = num_steps;
    p.seed = 1;
    edit(p);
    scenarios.push_back({std::move(name), p});
  };
  add("greedy", [](SamplingParams& p) { p.temperature = 0.0f; });
  add("temperature=0.8", [](SamplingParams& p) { p.temperature = 0.8f; });
  add("top_k=50", [](SamplingParams& p) { p.top_k = 50; });
  add("top_p=0.9", [](SamplingParams& p) { p.top_p = 0.9f; });
  add("top_k=50,top_p=0.9", [](SamplingParams& p) { p.top_k = 50, p.top_p = 0.9f; });
  add("top_p=0.9+penalties", [](SamplingParams& p) {
    p.top_p = 0.9f, p.repetition_penalty = 1.1f, p.frequency_penalty = 0.2f,
    p.presence_penalty = 0.2f;
  });
  add("top_p=0.9+logprobs=5", [](SamplingParams& p) { p.top_p = 0.9f, p.logprobs = 5; });

  using Clock = std::chrono::steady_clock;
  for (const float boost : {16.0f, 8.0f}) {
    const auto rows = make_rows(vocab_size, 16, boost);
    std::printf("vocab %lld, %d steps, prompt of %zu tokens, %s rows (boost %.0f)\n",
                static_cast<long long>(vocab_size), num_steps, prompt.size(),
                boost > 10.0f ? "peaked" : "flat", boost);
    std::printf("%-24s %12s %12s %8s\n", "scenario", "ours us/tok", "naive us/tok", "ratio");
    for (const Scenario& s : scenarios) {
      RequestSampler sampler(s.params, prompt, std::vector<int32_t>{0}, 0);
      std::vector<float> row;
      // Warm-up step (sizes the scratch buffers), not timed.
      row = rows[0];
      sampler.accept(sampler.sample(row.data(), vocab_size).token_id);
      double ours_s = 0.0;
      for (int step = 0; step < num_steps; ++step) {
        row = rows[step % rows.size()];
        const auto start = Clock::now();
        const int32_t id = sampler.sample(row.data(), vocab_size).token_id;
        sampler.accept(id);
        ours_s += std::chrono::duration<double>(Clock::now() - start).count();
      }
      std::vector<int32_t> output;
      std::mt19937_64 naive_gen(1);
      const int num_naive_steps = std::max(1, num_steps / 4);  // it is slow; fewer steps suffice
      double naive_s = 0.0;
      for (int step = 0; step < num_naive_steps; ++step) {
        const auto start = Clock::now();
        output.push_back(
            naive_sample(s.params, rows[step % rows.size()], prompt, output, naive_gen));
        naive_s += std::chrono::duration<double>(Clock::now() - start).count();
      }
      const double ours_us = ours_s / num_steps * 1e6;
      const double naive_us = naive_s / num_naive_steps * 1e6;
      std::printf("%-24s %12.1f %12.1f %7.1fx\n", s.name.c_str(), ours_us, naive_us,
                  naive_us / ours_us);
    }
  }
  return 0;
}
