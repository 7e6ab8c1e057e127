// Quantized matmul speed against this machine's limits, all measured in one run:
//  - decode (1 token) at the DeepSeek-Coder-1.3B shapes for bf16, int8 and int4 weights, each
//    weight-only (fp32 activations) and W8A8 / W4A8 (int8 activations): GB/s of weight bytes
//    read (values + scales + mins) and that as a fraction of the read-bandwidth probe;
//  - prefill at 512 tokens (and batched decode at 32): GOP/s (2 * tokens * rows * cols / time)
//    of each weight type next to the bf16 matmul.
//  - the machine's int8 multiply-add and fp32 FMA peaks (bench/compute_peak.h), so that each
//    prefill figure is also a fraction of the peak of the instructions it runs on.
// Threads: OMP_NUM_THREADS (default: every core).
// Usage: bench_quant_kernels [repeats] [--isa NAME] [--only NAME] [--prefill-only [TOKENS]]
//                            [--moe [TOKENS]] [--moe-cached]
//   --isa NAME       force a kernel table (as --isa / PAGODA_ISA do for the engine); with avx2
//                    the peaks are those of the 256-bit instructions, also on an AVX-512 CPU.
//   --prefill-only   skip the 512 MiB decode streams: one call of TOKENS (default 128) tokens
//                    and one of 1 token (compute-bound decode, matrix in cache) per weight type
//                    at 2048x2048, 5504x2048 and 2048x5504, each as a share of both peaks.
//   --only NAME      only the weight types whose name holds NAME (e.g. "W8A8 panels").
//   --moe-cached     with --moe: every expert shares one set of weights, which then stays in
//                    cache: the layer's compute side without its weight stream.
//   --moe [TOKENS]   instead, one DeepSeek-V2-Lite MoE layer (hidden 2048, 64 experts of 1408,
//                    top-6, 2 shared fused into one MLP of 2816) through MoeDispatcher::forward,
//                    per weight type, at TOKENS tokens (default 128 and 32): the experts' token
//                    groups run through the same tiles as a dense prefill, so the same shares
//                    of peak are the aim. Ops count the router, the routed and shared MLPs.
// GGUF files run as these rows (loader/gguf_repack.h): Q8_0, Q5_0, Q6_K and Q5_K become int8
// g32 and Q4_K int4 g32 with mins, both with int8 activations, and on the CPU device they stay
// row-major (no panels): "int8 g32 W8A8 (Q8_0 Q6_K)" and "int4 g32 W4A8 (Q4_K)" are their exact
// layouts (a Q4_K_M file mixes Q4_K, Q6_K, Q5_0 and Q8_0); Q4_0 is its own row.
// The "panels" rows (avx2, and avx512 without VNNI) are the int8 W8A8 rows above with the
// weights packed into lane panels as the loader packs them: decode streams the panels, and no
// call repacks; set beside their row-major rows they give what packing at load changes.
// Every figure is also given per CPU-second of this process (see bench_kernels.cpp: on a
// machine shared with other work that is the ratio to trust; run with OMP_WAIT_POLICY=passive).
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "compute_peak.h"
#include "kernels/bandwidth.h"
#include "kernels/host_context.h"
#include "kernels/kernels.h"
#include "kernels/lane_panels.h"
#include "kernels/ops.h"
#include "kernels/quantize.h"
#include "model/layers/moe.h"
#include "util/half.h"

namespace {

using pagoda::DType;
using pagoda::WeightView;

struct Shape {
  const char* name;
  int64_t rows, cols;
};

const Shape kShapes[] = {{"2048x2048", 2048, 2048},
                         {"5504x2048", 5504, 2048},
                         {"2048x5504", 2048, 5504},
                         {"32256x2048", 32256, 2048}};

// The weight layouts compared: dtype, group size (0: per output channel), int8 activations,
// and for int4 whether each min is -8 * its scale (Q4_0: the mins plane is never read, so its
// bytes do not count).
struct Variant {
  const char* name;
  DType dtype;
  int64_t group_size;
  bool int8_activations;
  bool symmetric_int4 = false;
  // int8 W8A8 packed into lane panels as the loader packs it (kernels/lane_panels.h), run only
  // where the table reads them (KernelTable::int8_lane_panels: avx2, avx512 without VNNI,
  // neon_dotprod, neon_i8mm), in the layout it names.
  bool lane_panels = false;
};

const Variant kVariants[] = {
    {"bf16", DType::kBF16, 0, false},
    {"int8 weight-only", DType::kI8, 0, false},
    {"int8 W8A8", DType::kI8, 0, true},
    {"int8 g32 W8A8 (Q8_0 Q6_K)", DType::kI8, 32, true},
    {"int8 W8A8 panels", DType::kI8, 0, true, false, true},
    {"int8 g32 W8A8 panels", DType::kI8, 32, true, false, true},
    {"int4 g32 weight-only", DType::kI4, 32, false},
    {"int4 g32 W4A8 (Q4_K)", DType::kI4, 32, true},
    {"int4 g32 W4A8 (Q4_0)", DType::kI4, 32, true, true},
    {"int4 g128 W4A8", DType::kI4, 128, true},
};

// Enough copies of a matrix that together they overflow the last-level cache.
constexpr int64_t kMinStreamBytes = int64_t{512} << 20;

// A weight in one layout with pseudo-random contents (speed does not depend on the values,
// so no quantizer is run: a 512 MiB fill has to be quick).
struct OwnedWeight {
  std::vector<uint64_t> values;  // 8-byte words, so the fill is fast and the data aligned
  std::vector<uint16_t> scales, mins;
  pagoda::LanePanels panels;  // Variant::lane_panels: in place of values and scales
  WeightView view;
  int64_t bytes = 0;
};

// --only NAME: the variants whose name holds NAME (one weight type at a time for perf).
std::string only_variant;
// --moe-cached: every expert computes with the same weights (the layer without its weight stream).
bool moe_cached_experts = false;

bool skipped(const Variant& v) {
  if (!only_variant.empty() && std::string(v.name).find(only_variant) == std::string::npos) {
    return true;
  }
  return v.lane_panels && !pagoda::kernels().int8_lane_panels;
}

uint64_t next_random(uint64_t& state) {  // xorshift64*
  state ^= state >> 12;
  state ^= state << 25;
  state ^= state >> 27;
  return state * 2685821657736338717ull;
}

OwnedWeight make_weight(const Variant& v, const Shape& s, uint64_t seed) {
  OwnedWeight w;
  const int64_t value_bytes = pagoda::dtype_row_bytes(v.dtype, s.cols) * s.rows;
  w.values.resize(static_cast<size_t>((value_bytes + 7) / 8));
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (uint64_t& word : w.values) word = next_random(state);
  if (v.dtype == DType::kBF16) {  // keep bf16 values finite and small: ±[0.5, 1)
    auto* h = reinterpret_cast<uint16_t*>(w.values.data());
    for (int64_t i = 0; i < s.rows * s.cols; ++i)
      h[i] = static_cast<uint16_t>(0x3f00 | (h[i] & 0x807f));
  }
  w.view = WeightView{w.values.data(), v.dtype, s.rows, s.cols};
  w.bytes = value_bytes;
  if (pagoda::is_quantized(v.dtype)) {
    const int64_t group = v.group_size == 0 ? s.cols : v.group_size;
    const int64_t num_scales = s.rows * (s.cols / group);
    w.scales.assign(static_cast<size_t>(num_scales), pagoda::f32_to_f16(0.01f));
    w.view.scales = w.scales.data();
    w.bytes += num_scales * 2;
    if (v.dtype == DType::kI4) {
      const float scale = pagoda::f16_to_f32(pagoda::f32_to_f16(0.01f));
      w.mins.assign(static_cast<size_t>(num_scales),
                    pagoda::f32_to_f16(v.symmetric_int4 ? -8.0f * scale : -0.08f));
      w.view.mins = w.mins.data();
      w.view.symmetric_int4 = v.symmetric_int4;
      if (!v.symmetric_int4) w.bytes += num_scales * 2;
    }
    w.view.group_size = group;
    w.view.int8_activations = v.int8_activations;
    if (v.symmetric_int4 && !pagoda::symmetric_int4_mins(w.view)) std::abort();
  }
  if (v.lane_panels) {
    const pagoda::LanePanelLayout layout = pagoda::kernels().int8_lane_panels;
    w.panels = pagoda::pack_lane_panels(w.view, layout);
    w.view = pagoda::with_lane_panels(w.view, w.panels.bytes.get(), layout);
    w.values = {};
    w.scales = {};
  }
  return w;
}

std::vector<float> random_f32(int64_t n, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t state = seed + 12345;
  for (float& f : v) f = static_cast<float>(next_random(state) >> 40) / 8388608.0f - 1.0f;
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

// The prefill table of --prefill-only: every weight type at the dense shapes, GOP/s as a share
// of the fp32 FMA peak and of the int8 multiply-add peak measured in the same process, for a
// call of `tokens` tokens and for one token (decode with the matrix in cache: the compute side).
void prefill_only(int repeats, int64_t tokens, const pagoda::bench::ComputePeak& peak) {
  std::printf(
      "GOP/s = 2 * tokens * rows * cols / time (best of %d); %%fma / %%int8: of the peaks "
      "above (/CPU: both per CPU-second, the ratio to trust on a shared machine)\n",
      repeats);
  std::printf("  %-26s %-11s %6s %9s %7s %7s %12s %9s %9s\n", "weights", "shape", "tokens", "GOP/s",
              "%fma", "%int8", "GOP/s/CPU-s", "%fma/CPU", "%int8/CPU");
  for (const Shape& s : {kShapes[0], kShapes[1], kShapes[2]}) {
    for (int64_t n : {tokens, int64_t{1}}) {
      const std::vector<float> x = random_f32(n * s.cols, 5);
      std::vector<float> y(static_cast<size_t>(n * s.rows));
      for (const Variant& v : kVariants) {
        if (skipped(v)) continue;
        const OwnedWeight w = make_weight(v, s, 3);
        const Timing t = best_of(n == 1 ? 4 * repeats : repeats,
                                 [&] { pagoda::ops::matmul(x.data(), n, w.view, y.data()); });
        const double ops = 2.0 * static_cast<double>(n * s.rows * s.cols);
        const double gops = ops / t.wall_s / 1e9;
        const double per_cpu = ops / t.cpu_s / 1e9;
        std::printf("  %-26s %-11s %6lld %9.1f %6.1f%% %6.1f%% %12.1f %8.1f%% %8.1f%%\n", v.name,
                    s.name, static_cast<long long>(n), gops, 100.0 * gops / peak.fp32_gflops,
                    100.0 * gops / peak.int8_gops, per_cpu,
                    100.0 * per_cpu / peak.fp32_gflops_per_cpu,
                    100.0 * per_cpu / peak.int8_gops_per_cpu);
      }
    }
  }
}

// The --moe table: one V2-Lite MoE layer per weight type, router in fp32 as the model has it.
void moe_layer(int repeats, const std::vector<int64_t>& token_counts,
               const pagoda::bench::ComputePeak& peak) {
  constexpr int64_t kHidden = 2048, kMoeInter = 1408, kExperts = 64, kTopK = 6;
  pagoda::MoeRouterConfig router;
  router.num_experts = kExperts;
  router.top_k = kTopK;
  router.scoring = pagoda::MoeScoring::kSoftmax;
  router.method = pagoda::MoeTopkMethod::kGreedy;
  router.scale_after_norm = false;
  const std::vector<float> router_f32 = random_f32(kExperts * kHidden, 11);
  std::printf(
      "MoE layer, V2-Lite shape (GOP/s = 2 * (router + routed + shared MACs) / time, best of "
      "%d); %%peak: W8A8/W4A8 of the int8 peak, the rest of the fp32 FMA peak\n",
      repeats);
  std::printf("  %-26s %6s %13s %9s %7s %12s %9s\n", "weights", "tokens", "tokens/expert", "GOP/s",
              "%peak", "GOP/s/CPU-s", "%peak/CPU");
  for (const Variant& v : kVariants) {
    if (v.group_size == 128 || skipped(v)) continue;  // 1408 is not a multiple of 128
    std::vector<OwnedWeight> owned;
    owned.reserve(3 * (kExperts + 1));
    const auto mlp = [&](int64_t inter, uint64_t seed) {
      owned.push_back(make_weight(v, {"gate", inter, kHidden}, seed));
      owned.push_back(make_weight(v, {"up", inter, kHidden}, seed + 1));
      owned.push_back(make_weight(v, {"down", kHidden, inter}, seed + 2));
      const size_t n = owned.size();
      return pagoda::ExpertMlp{owned[n - 3].view, owned[n - 2].view, owned[n - 1].view};
    };
    pagoda::MoeWeights w;
    w.router = WeightView{router_f32.data(), DType::kF32, kExperts, kHidden};
    if (moe_cached_experts) {  // one weight set for every expert: it stays in cache
      const pagoda::ExpertMlp one = mlp(kMoeInter, 1);
      w.experts.assign(kExperts, one);
    } else {
      for (int64_t e = 0; e < kExperts; ++e) w.experts.push_back(mlp(kMoeInter, 3 * e + 1));
    }
    w.has_shared = true;
    w.shared = mlp(2 * kMoeInter, 1000);
    pagoda::MoeDispatcher moe;
    for (const int64_t tokens : token_counts) {
      const std::vector<float> x = random_f32(tokens * kHidden, 5);
      std::vector<float> y(static_cast<size_t>(tokens * kHidden));
      const pagoda::ExecutionContext ctx = pagoda::host_execution_context();
      const Timing t =
          best_of(repeats, [&] { moe.forward(ctx, router, w, x.data(), tokens, y.data()); });
      const double macs = static_cast<double>(tokens) * kHidden *
                          (kExperts + 3.0 * kTopK * kMoeInter + 3.0 * 2 * kMoeInter);
      const double gops = 2.0 * macs / t.wall_s / 1e9, per_cpu = 2.0 * macs / t.cpu_s / 1e9;
      const double peak_gops = v.int8_activations ? peak.int8_gops : peak.fp32_gflops;
      const double peak_per_cpu =
          v.int8_activations ? peak.int8_gops_per_cpu : peak.fp32_gflops_per_cpu;
      std::printf("  %-26s %6lld %13.1f %9.1f %6.1f%% %12.1f %8.1f%%\n", v.name,
                  static_cast<long long>(tokens),
                  static_cast<double>(tokens * kTopK) / static_cast<double>(kExperts), gops,
                  100.0 * gops / peak_gops, per_cpu, 100.0 * per_cpu / peak_per_cpu);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 5;
  bool prefill = false, moe = false;
  int64_t prefill_tokens = 128;
  std::vector<int64_t> moe_tokens = {128, 32};
  std::string isa;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--isa") == 0 && i + 1 < argc) {
      isa = argv[++i];
    } else if (std::strcmp(argv[i], "--moe-cached") == 0) {
      moe_cached_experts = true;
    } else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      only_variant = argv[++i];
    } else if (std::strcmp(argv[i], "--prefill-only") == 0) {
      prefill = true;
      if (i + 1 < argc && argv[i + 1][0] != '-') prefill_tokens = std::atoll(argv[++i]);
    } else if (std::strcmp(argv[i], "--moe") == 0) {
      moe = true;
      if (i + 1 < argc && argv[i + 1][0] != '-') moe_tokens = {std::atoll(argv[++i])};
    } else {
      repeats = std::atoi(argv[i]);
    }
  }
  if (!isa.empty()) pagoda::set_kernel_isa(isa);
  const int threads = omp_get_max_threads();
  const pagoda::KernelTable& table = pagoda::kernels();
  std::printf("ISA %s, %d thread%s\n", table.isa, threads, threads == 1 ? "" : "s");
  if (prefill || moe) {
    const pagoda::bench::ComputePeak peak =
        pagoda::bench::measure_compute_peak(threads, std::strcmp(table.isa, "avx2") == 0);
    std::printf(
        "int8 multiply-add peak (%s): %.1f GOP/s, %.1f per CPU-s; fp32 FMA peak (%s): %.1f "
        "GFLOP/s, %.1f per CPU-s\n",
        peak.int8_instructions, peak.int8_gops, peak.int8_gops_per_cpu, peak.fp32_instructions,
        peak.fp32_gflops, peak.fp32_gflops_per_cpu);
    if (moe) {
      moe_layer(repeats, moe_tokens, peak);
    } else {
      prefill_only(repeats, prefill_tokens, peak);
    }
    return 0;
  }

  pagoda::BandwidthOptions probe;
  probe.num_threads = threads;
  double probe_per_cpu = 0.0;
  const double probe_gbps = pagoda::measure_read_bandwidth_gbps(probe, &probe_per_cpu);
  std::printf("memory read bandwidth (probe, %d threads): %.2f GB/s, %.2f GB/s per CPU-s\n",
              threads, probe_gbps, probe_per_cpu);
  const pagoda::bench::ComputePeak peak =
      pagoda::bench::measure_compute_peak(threads, std::strcmp(table.isa, "avx2") == 0);
  std::printf(
      "int8 multiply-add peak (probe, %s): %.1f GOP/s; fp32 FMA peak (%s): %.1f GFLOP/s\n\n",
      peak.int8_instructions, peak.int8_gops, peak.fp32_instructions, peak.fp32_gflops);

  std::printf("decode, 1 token (GB/s = weight bytes incl. scales / time):\n");
  std::printf("  %-26s %-11s %9s %8s %7s %12s %9s\n", "weights", "shape", "ms/matrix", "GB/s",
              "%probe", "GB/s/CPU-s", "%probe/CPU");
  for (const Variant& v : kVariants) {
    if (skipped(v)) continue;
    double all_bytes = 0.0, all_wall = 0.0, all_cpu = 0.0;
    for (const Shape& s : kShapes) {
      std::vector<OwnedWeight> copies;
      int64_t total = 0;
      for (uint64_t c = 0; total < kMinStreamBytes; ++c) {
        copies.push_back(make_weight(v, s, c + 1));
        total += copies.back().bytes;
      }
      const std::vector<float> x = random_f32(s.cols, 7);
      std::vector<float> y(static_cast<size_t>(s.rows));
      const Timing t = best_of(repeats, [&] {
        for (const OwnedWeight& w : copies) pagoda::ops::matmul(x.data(), 1, w.view, y.data());
      });
      const double bytes = static_cast<double>(total);
      all_bytes += bytes;
      all_wall += t.wall_s;
      all_cpu += t.cpu_s;
      const double gbps = bytes / t.wall_s / 1e9, per_cpu = bytes / t.cpu_s / 1e9;
      std::printf("  %-26s %-11s %9.3f %8.2f %6.1f%% %12.2f %8.1f%%\n", v.name, s.name,
                  t.wall_s / static_cast<double>(copies.size()) * 1e3, gbps,
                  100.0 * gbps / probe_gbps, per_cpu, 100.0 * per_cpu / probe_per_cpu);
    }
    const double gbps = all_bytes / all_wall / 1e9, per_cpu = all_bytes / all_cpu / 1e9;
    std::printf("  %-26s %-11s %9s %8.2f %6.1f%% %12.2f %8.1f%%\n\n", v.name, "all shapes", "",
                gbps, 100.0 * gbps / probe_gbps, per_cpu, 100.0 * per_cpu / probe_per_cpu);
  }

  // %peak: W8A8 / W4A8 against the int8 peak, the float paths (fp32 FMAs on widened weights)
  // against the fp32 FMA peak (bf16 on AVX512_BF16 runs vdpbf16ps, up to twice that).
  std::printf("prefill / batched decode (GOP/s = 2 * tokens * rows * cols / time):\n");
  std::printf("  %-26s %-11s %6s %9s %7s %12s\n", "weights", "shape", "tokens", "GOP/s", "%peak",
              "GOP/s/CPU-s");
  for (int64_t tokens : {int64_t{512}, int64_t{32}}) {
    for (const Shape& s : {kShapes[0], kShapes[1]}) {
      const std::vector<float> x = random_f32(tokens * s.cols, 5);
      std::vector<float> y(static_cast<size_t>(tokens * s.rows));
      for (const Variant& v : kVariants) {
        if (skipped(v)) continue;
        const OwnedWeight w = make_weight(v, s, 3);
        const int reps = std::max(1, tokens >= 512 ? repeats / 2 : repeats);
        const Timing t =
            best_of(reps, [&] { pagoda::ops::matmul(x.data(), tokens, w.view, y.data()); });
        const double ops = 2.0 * static_cast<double>(tokens * s.rows * s.cols);
        const double gops = ops / t.wall_s / 1e9;
        const double peak_gops = v.int8_activations ? peak.int8_gops : peak.fp32_gflops;
        std::printf("  %-26s %-11s %6lld %9.1f %6.1f%% %12.1f\n", v.name, s.name,
                    static_cast<long long>(tokens), gops,
                    peak_gops > 0.0 ? 100.0 * gops / peak_gops : 0.0, ops / t.cpu_s / 1e9);
      }
    }
  }
  return 0;
}
