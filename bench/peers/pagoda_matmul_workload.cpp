// One weight type's matmul through the kernel table, as a workload whose executed instructions
// qemu's TCG plugin counts (bench/peers/aarch64_dynamic_counts.sh, tcg_insn_counts.c): random
// weights of the type in Pagoda's layout (as the loader leaves them: GGUF Q8_0 as row-major int8
// in groups of 32, Q4_0 as symmetric int4, Q4_K/Q4_1 as int4 with mins, row-major or in the lane
// panels the table reads), one warm-up call, then CALLS calls of ops::matmul each between the
// region markers tcg_region_on() / tcg_region_off(), so that the plugin's on=/off= count every
// instruction of the call: activation quantization, the thread split, the tiles, the finish.
//
// usage: pagoda_matmul_workload CASE TOKENS [ROWS COLS] [--calls N] [--isa NAME]
//   CASE   one of kWorkloadCases below (e.g. q8_0, q8_0_panels, q4_0, f16)
// Prints "case isa tokens rows cols macs_per_call calls"; exits 3 when the table cannot run the
// case (no lane panels on it), 2 on bad usage (an ISA this build or CPU does not have).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/lane_panels.h"
#include "kernels/ops.h"
#include "util/half.h"

// The markers: never inlined, never merged with each other (noipa), so each is a block of its
// own symbol that the plugin sees execute.
extern "C" __attribute__((noipa)) void tcg_region_on() {
  asm volatile("" ::: "memory");
}
extern "C" __attribute__((noipa)) void tcg_region_off() {
  asm volatile("" ::: "memory");
}

namespace {

using pagoda::DType;
using pagoda::WeightView;

// A weight type as Pagoda holds it after loading. A new packed layout is one row here and one
// branch in pack_lane_panels().
struct WorkloadCase {
  const char* name;
  DType dtype;
  int64_t group_size;  // kI8 / kI4; 0: one group per row (per output channel)
  bool symmetric_int4;
  bool lane_panels;  // packed into the layout the table's tiles read
};

constexpr WorkloadCase kWorkloadCases[] = {
    {"q8_0", DType::kI8, 32, false, false},        // GGUF Q8_0 (row-major on the CPU device)
    {"q8_0_panels", DType::kI8, 32, false, true},  // int8 g32 packed at load
    {"int8", DType::kI8, 0, false, false},         // per-channel int8, row-major
    {"int8_panels", DType::kI8, 0, false, true},   // per-channel int8 packed at load (-q int8)
    {"q4_0", DType::kI4, 32, true, false},         // GGUF Q4_0: symmetric, no mins read
    {"q4_k", DType::kI4, 32, false, false},        // GGUF Q4_K / Q4_1: int4 with mins
    {"q4_0_panels", DType::kI4, 32, true, true},   // Q4_0 packed at load
    {"q4_k_panels", DType::kI4, 32, false, true},  // Q4_K / Q4_1 packed at load
    {"f16", DType::kF16, 0, false, false},         // fp16 arithmetic where the table has it
    {"bf16", DType::kBF16, 0, false, false},       // bfdot / bfmmla, or widened to fp32
    {"f32", DType::kF32, 0, false, false},
};

// The weights and everything they point to.
struct WorkloadWeights {
  std::vector<uint8_t> values;
  std::vector<uint16_t> scales, mins;
  pagoda::LanePanels panels;
  WeightView view;
};

std::vector<uint16_t> random_halves(std::mt19937& rng, size_t n, float lo, float hi, bool bf16) {
  std::uniform_real_distribution<float> value(lo, hi);
  std::vector<uint16_t> out(n);
  for (uint16_t& h : out)
    h = bf16 ? pagoda::f32_to_bf16(value(rng)) : pagoda::f32_to_f16(value(rng));
  return out;
}

// Whether the table reads lane panels of this case's dtype.
bool has_lane_panels(const WorkloadCase& c, const pagoda::KernelTable& k) {
  return static_cast<bool>(k.lane_panel_layout(c.dtype));
}

// v packed as the loader packs it for table k, into `storage`.
WeightView pack_lane_panels(const WeightView& v, const pagoda::KernelTable& k,
                            pagoda::LanePanels& storage) {
  const pagoda::LanePanelLayout layout = k.lane_panel_layout(v.dtype);
  storage = pagoda::pack_lane_panels(v, layout);
  return pagoda::with_lane_panels(v, storage.bytes.get(), layout);
}

// Random values: the instruction counts do not depend on them (no data-dependent branches in
// the kernels), and random bytes cost the emulator far less than quantizing floats would.
WorkloadWeights make_weights(const WorkloadCase& c, int64_t rows, int64_t cols,
                             const pagoda::KernelTable& k) {
  std::mt19937 rng(23);
  WorkloadWeights w;
  WeightView& v = w.view;
  v.dtype = c.dtype;
  v.rows = rows;
  v.cols = cols;
  const auto n = static_cast<size_t>(rows * cols);
  if (!pagoda::is_quantized(c.dtype)) {
    if (c.dtype == DType::kF32) {
      std::uniform_real_distribution<float> value(-0.1f, 0.1f);
      w.values.resize(n * 4);
      auto* f = reinterpret_cast<float*>(w.values.data());
      for (size_t i = 0; i < n; ++i) f[i] = value(rng);
      v.data = w.values.data();
    } else {
      w.scales = random_halves(rng, n, -0.1f, 0.1f, c.dtype == DType::kBF16);
      v.data = w.scales.data();
    }
    return w;
  }
  v.group_size = c.group_size ? c.group_size : cols;
  v.int8_activations = true;
  w.values.resize(static_cast<size_t>(pagoda::dtype_row_bytes(c.dtype, cols) * rows));
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& b : w.values) b = static_cast<uint8_t>(byte(rng));
  const auto num_groups = static_cast<size_t>(rows * (cols / v.group_size));
  w.scales = random_halves(rng, num_groups, 0.001f, 0.02f, false);
  if (c.dtype == DType::kI4) {
    w.mins = random_halves(rng, num_groups, -0.15f, 0.05f, false);
    if (c.symmetric_int4)
      for (size_t i = 0; i < num_groups; ++i)
        w.mins[i] = pagoda::f32_to_f16(-8.0f * pagoda::f16_to_f32(w.scales[i]));
    v.mins = w.mins.data();
    v.symmetric_int4 = c.symmetric_int4;
  }
  v.data = w.values.data();
  v.scales = w.scales.data();
  if (c.lane_panels) v = pack_lane_panels(v, k, w.panels);
  return w;
}

int usage() {
  std::fprintf(stderr,
               "usage: pagoda_matmul_workload CASE TOKENS [ROWS COLS] [--calls N] [--isa NAME]\n"
               "  CASE:");
  for (const WorkloadCase& c : kWorkloadCases) std::fprintf(stderr, " %s", c.name);
  std::fprintf(stderr, "\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string_view> positional;
  int calls = 2;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--calls" && i + 1 < argc) {
      calls = std::atoi(argv[++i]);
    } else if (arg == "--isa" && i + 1 < argc) {
      try {
        pagoda::set_kernel_isa(argv[++i]);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 2;
      }
    } else {
      positional.push_back(arg);
    }
  }
  if (positional.size() != 2 && positional.size() != 4) return usage();
  const WorkloadCase* chosen = nullptr;
  for (const WorkloadCase& c : kWorkloadCases)
    if (positional[0] == c.name) chosen = &c;
  if (!chosen || calls < 1) return usage();
  const int64_t tokens = std::atoll(positional[1].data());
  const int64_t rows = positional.size() == 4 ? std::atoll(positional[2].data()) : 512;
  const int64_t cols = positional.size() == 4 ? std::atoll(positional[3].data()) : 2048;
  if (tokens < 1 || rows < 1 || cols < 1 || cols % 32 != 0) return usage();

  const pagoda::KernelTable& k = pagoda::kernels();
  if (chosen->lane_panels && !has_lane_panels(*chosen, k)) {
    std::fprintf(stderr, "%s: table %s reads no %s lane panels\n", chosen->name, k.isa,
                 pagoda::dtype_name(chosen->dtype));
    return 3;
  }
  const WorkloadWeights w = make_weights(*chosen, rows, cols, k);
  std::vector<float> x(static_cast<size_t>(tokens * cols)), y(static_cast<size_t>(tokens * rows));
  std::mt19937 rng(32);
  std::uniform_real_distribution<float> activation(-1.0f, 1.0f);
  for (float& v : x) v = activation(rng);

  // The first call sizes the per-thread scratch (activation blocks, panel buffers).
  pagoda::ops::matmul(k, x.data(), tokens, w.view, y.data(), rows);
  for (int i = 0; i < calls; ++i) {
    tcg_region_on();
    pagoda::ops::matmul(k, x.data(), tokens, w.view, y.data(), rows);
    tcg_region_off();
  }
  std::printf("%s %s %lld %lld %lld %lld %d\n", chosen->name, k.isa, static_cast<long long>(tokens),
              static_cast<long long>(rows), static_cast<long long>(cols),
              static_cast<long long>(tokens * rows * cols), calls);
  return 0;
}
