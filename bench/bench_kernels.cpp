// Matmul speed against this machine's limits, all measured in one run:
//  - decode (1 token) on bf16 weights at the DeepSeek-Coder-1.3B shapes, in GB/s of weights
//    streamed and as a fraction of the read bandwidth probe (bandwidth.h);
//  - prefill GFLOP/s at 128 and 512 tokens;
//  - the selected ISA against the scalar reference table on the same work.
// Threads: OMP_NUM_THREADS (default: every core).
// Usage: bench_kernels [repeats] [--isa NAME] [--attention]
//   --isa NAME     force a kernel table (avx2 on an AVX-512 CPU: the AVX2 figures)
//   --attention    instead, causal prefill attention of one prompt at the DeepSeek-Coder-1.3B
//                  shape (16 heads of 128, fp16 paged cache, blocks of 16) for 512- and
//                  4096-token prompts: time per prompt token, GFLOP/s (q.k and p.v, 2 * 16 *
//                  (128 + 128) * L(L+1)/2) as a share of the fp32 FMA peak measured in the
//                  same run, and the 4096/512 ratio of the per-token times. Attention is the
//                  only part of a prefill whose cost per token grows with the prompt.
//
// Each figure is also given per CPU-second of this process (user + system time): on a machine
// shared with other work, wall time counts time the scheduler gave to others, CPU time does not.
// Run with OMP_WAIT_POLICY=passive there, so threads waiting at a barrier sleep instead of
// spinning (spinning would count as CPU time).
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "compute_peak.h"
#include "kernels/attention.h"
#include "kernels/bandwidth.h"
#include "kernels/kernels.h"
#include "kernels/ops.h"
#include "util/half.h"

namespace {

using pagoda::DType;
using pagoda::WeightView;

struct Shape {
  const char* name;
  int64_t rows, cols;
};

// hidden 2048, intermediate 5504, vocab 32256 (DeepSeek-Coder-1.3B).
const Shape kShapes[] = {{"q/k/v/o 2048x2048", 2048, 2048},
                         {"gate/up 5504x2048", 5504, 2048},
                         {"down    2048x5504", 2048, 5504},
                         {"lm_head 32256x2048", 32256, 2048}};

// Enough copies of a matrix that together they overflow the last-level cache, as the layers of
// a real model do: each timed pass reads every copy once.
constexpr int64_t kMinStreamBytes = int64_t{512} << 20;

std::vector<uint16_t> random_bf16(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<uint16_t> v(n);
  for (auto& h : v) h = pagoda::f32_to_bf16(dist(rng));
  return v;
}

std::vector<float> random_f32(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& f : v) f = dist(rng);
  return v;
}

double process_cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6;
}

struct Timing {
  double wall_s = 1e30;  // best run
  double cpu_s = 1e30;   // least CPU time of any run
};

template <class Fn>
Timing best_of(int repeats, Fn&& fn) {
  fn();  // warm-up: page faults, scratch growth
  Timing best;
  for (int r = 0; r < repeats; ++r) {
    const double cpu0 = process_cpu_seconds();
    const auto start = std::chrono::steady_clock::now();
    fn();
    const auto stop = std::chrono::steady_clock::now();
    best.wall_s = std::min(best.wall_s, std::chrono::duration<double>(stop - start).count());
    best.cpu_s = std::min(best.cpu_s, process_cpu_seconds() - cpu0);
  }
  return best;
}

// Runs `table` over rows split across the OpenMP threads, like ops::matmul but for a chosen
// table (ops::matmul always uses kernels()).
void matmul_with(const pagoda::KernelTable& table, const float* x, int64_t num_tokens,
                 const WeightView& w, float* y) {
#pragma omp parallel
  {
    const int64_t parts = omp_get_num_threads(), part = omp_get_thread_num();
    const int64_t per = ((w.rows + parts - 1) / parts + 15) / 16 * 16;
    const int64_t begin = part * per, end = std::min(w.rows, begin + per);
    if (begin < end) table.matmul(x, num_tokens, w, begin, end, y, w.rows);
  }
}

// The --attention table.
void prefill_attention(int repeats, const pagoda::bench::ComputePeak& peak) {
  constexpr int32_t kHeads = 16, kHeadDim = 128, kBlock = 16;
  std::printf(
      "prefill attention, one prompt, %d heads x %d, fp16 cache, blocks of %d (best of %d); "
      "%%fma: of the fp32 FMA peak above\n",
      kHeads, kHeadDim, kBlock, repeats);
  std::printf("  %6s %10s %12s %9s %7s %12s %9s\n", "tokens", "ms/prompt", "us/token", "GFLOP/s",
              "%fma", "GFLOP/s/CPU", "%fma/CPU");
  double per_token_512 = 0.0;
  for (const int32_t len : {512, 4096}) {
    const int32_t num_blocks = len / kBlock;
    const int64_t values = int64_t{num_blocks} * kBlock * kHeads * kHeadDim;
    std::vector<uint16_t> k(static_cast<size_t>(values)), v(static_cast<size_t>(values));
    std::mt19937 rng(9);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (auto& h : k) h = pagoda::f32_to_f16(dist(rng));
    for (auto& h : v) h = pagoda::f32_to_f16(dist(rng));
    pagoda::PagedKvLayer cache{k.data(), v.data(), kBlock, kHeads, kHeadDim, kHeadDim, DType::kF16};
    std::vector<int32_t> table(static_cast<size_t>(num_blocks));
    for (int32_t b = 0; b < num_blocks; ++b) table[static_cast<size_t>(b)] = b;
    const pagoda::AttentionSequence seq{0, len, len, table.data()};
    const std::vector<float> q = random_f32(int64_t{len} * kHeads * kHeadDim, 4);
    std::vector<float> out(q.size());
    const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
    const Timing t = best_of(repeats, [&] {
      pagoda::paged_attention(q.data(), kHeads, cache, &seq, 1, scale, out.data());
    });
    const double flops =
        2.0 * kHeads * (2.0 * kHeadDim) * (static_cast<double>(len) * (len + 1) / 2.0);
    const double gflops = flops / t.wall_s / 1e9, per_cpu = flops / t.cpu_s / 1e9;
    const double per_token = t.wall_s / len;
    if (len == 512) per_token_512 = per_token;
    std::printf("  %6d %10.2f %12.2f %9.1f %6.1f%% %12.1f %8.1f%%\n", len, t.wall_s * 1e3,
                per_token * 1e6, gflops, 100.0 * gflops / peak.fp32_gflops, per_cpu,
                100.0 * per_cpu / peak.fp32_gflops_per_cpu);
    if (len == 4096) {
      std::printf("  attention per token, 4096 vs 512 tokens: %.2fx\n", per_token / per_token_512);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 5;
  bool attention = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--isa") == 0 && i + 1 < argc) {
      pagoda::set_kernel_isa(argv[++i]);
    } else if (std::strcmp(argv[i], "--attention") == 0) {
      attention = true;
    } else {
      repeats = std::atoi(argv[i]);
    }
  }
  const int threads = omp_get_max_threads();
  const pagoda::KernelTable& fast = pagoda::kernels();
  const pagoda::KernelTable& scalar = *pagoda::kernels_for("scalar");
  std::printf("ISA %s%s, %d thread%s\n", fast.isa,
              fast.matmul_bf16_activations ? " (vdpbf16ps)" : "", threads, threads == 1 ? "" : "s");
  if (attention) {
    const pagoda::bench::ComputePeak peak =
        pagoda::bench::measure_compute_peak(threads, std::strcmp(fast.isa, "avx2") == 0);
    std::printf("fp32 FMA peak (%s): %.1f GFLOP/s, %.1f per CPU-s\n", peak.fp32_instructions,
                peak.fp32_gflops, peak.fp32_gflops_per_cpu);
    prefill_attention(repeats, peak);
    return 0;
  }

  pagoda::BandwidthOptions probe;
  probe.num_threads = threads;
  double bandwidth_per_cpu = 0.0;
  const double bandwidth = pagoda::measure_read_bandwidth_gbps(probe, &bandwidth_per_cpu);
  std::printf("memory read bandwidth (probe, %d threads): %.2f GB/s, %.2f GB/s per CPU-s\n\n",
              threads, bandwidth, bandwidth_per_cpu);

  std::printf("decode, bf16 weights, 1 token:\n");
  double total_bytes = 0.0, total_seconds = 0.0;
  for (const Shape& s : kShapes) {
    const int64_t bytes = s.rows * s.cols * 2;
    const int64_t copies = std::max<int64_t>(1, (kMinStreamBytes + bytes - 1) / bytes);
    std::vector<std::vector<uint16_t>> weights;
    for (int64_t c = 0; c < copies; ++c) weights.push_back(random_bf16(s.rows * s.cols, 1 + c));
    const std::vector<float> x = random_f32(s.cols, 7);
    std::vector<float> y(s.rows);
    const Timing t = best_of(repeats, [&] {
      for (const auto& w : weights) {
        pagoda::ops::matmul(x.data(), 1, WeightView{w.data(), DType::kBF16, s.rows, s.cols},
                            y.data());
      }
    });
    const double gbps = static_cast<double>(bytes * copies) / t.wall_s / 1e9;
    total_bytes += static_cast<double>(bytes * copies);
    total_seconds += t.wall_s;
    const double per_cpu = static_cast<double>(bytes * copies) / t.cpu_s / 1e9;
    std::printf(
        "  %-20s %7.3f ms/matrix  %6.2f GB/s  %5.1f%% of probe   %6.2f GB/s per CPU-s"
        "  %5.1f%% of probe per CPU-s\n",
        s.name, t.wall_s / copies * 1e3, gbps, 100.0 * gbps / bandwidth, per_cpu,
        100.0 * per_cpu / bandwidth_per_cpu);
  }
  const double overall = total_bytes / total_seconds / 1e9;
  std::printf("  %-20s %7s           %6.2f GB/s  %5.1f%% of probe\n\n", "all shapes", "", overall,
              100.0 * overall / bandwidth);

  std::printf("prefill, bf16 weights (GFLOP/s = 2 * tokens * rows * cols / time):\n");
  for (int64_t tokens : {int64_t{128}, int64_t{512}}) {
    for (const Shape& s : {kShapes[0], kShapes[1]}) {
      const std::vector<uint16_t> w = random_bf16(s.rows * s.cols, 3);
      const std::vector<float> x = random_f32(tokens * s.cols, 5);
      std::vector<float> y(tokens * s.rows);
      const WeightView view{w.data(), DType::kBF16, s.rows, s.cols};
      const Timing t = best_of(std::max(1, repeats / 2),
                               [&] { pagoda::ops::matmul(x.data(), tokens, view, y.data()); });
      const double flops = 2.0 * tokens * s.rows * s.cols;
      std::printf("  %3lld tokens  %-20s %8.2f GFLOP/s   %8.2f GFLOP/s per CPU-s\n",
                  static_cast<long long>(tokens), s.name, flops / t.wall_s / 1e9,
                  flops / t.cpu_s / 1e9);
    }
  }

  std::printf("\n%s vs scalar reference (same threads, 2048x2048 bf16):\n", fast.isa);
  for (int64_t tokens : {int64_t{1}, int64_t{128}}) {
    const Shape s = kShapes[0];
    const std::vector<uint16_t> w = random_bf16(s.rows * s.cols, 3);
    const std::vector<float> x = random_f32(tokens * s.cols, 5);
    std::vector<float> y(tokens * s.rows);
    const WeightView view{w.data(), DType::kBF16, s.rows, s.cols};
    const int reps = tokens == 1 ? repeats : 1;
    const Timing t_fast =
        best_of(reps, [&] { matmul_with(fast, x.data(), tokens, view, y.data()); });
    const Timing t_scalar =
        best_of(reps, [&] { matmul_with(scalar, x.data(), tokens, view, y.data()); });
    std::printf(
        "  %3lld token%s  %s %9.3f ms   scalar %9.3f ms   speed-up %5.1fx (CPU time %5.1fx)\n",
        static_cast<long long>(tokens), tokens == 1 ? " " : "s", fast.isa, t_fast.wall_s * 1e3,
        t_scalar.wall_s * 1e3, t_scalar.wall_s / t_fast.wall_s, t_scalar.cpu_s / t_fast.cpu_s);
  }
  return 0;
}
