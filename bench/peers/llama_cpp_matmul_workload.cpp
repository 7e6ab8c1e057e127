// llama.cpp's side of bench/peers/aarch64_dynamic_counts.py: one MUL_MAT of a GGUF weight type
// through ggml's CPU backend, as the workload whose executed instructions qemu's TCG plugin
// counts (tcg_insn_counts.c), beside pagoda_matmul_workload. Random fp32 weights quantized by
// ggml to the type, in the CPU buffer or, for the _repack cases, in the CPU backend's "extra"
// buffer type CPU_REPACK, the one llama.cpp's loader puts weights in by default (ggml then
// picks its interleaved layout from the CPU's features: Q4_0 4x4 with the dot product, 4x8 with
// i8mm; Q4_K 8x4 / 8x8; Q8_0 4x4 / 4x8). One thread. One warm-up graph computation, then CALLS
// computations, each between the region markers tcg_region_on() / tcg_region_off(): the
// activations' quantization, ggml's graph plan and dispatch, the kernels.
// Not part of Pagoda's build: aarch64_dynamic_counts.py compiles it against a ggml build.
//
// usage: llama_cpp_matmul_workload CASE TOKENS [ROWS COLS] [--calls N]
// Prints "case ggml tokens rows cols macs_per_call calls"; exits 3 when the repack buffer type
// takes no such weight here, 2 on bad usage.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string_view>
#include <vector>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

extern "C" __attribute__((noipa)) void tcg_region_on() {
  asm volatile("" ::: "memory");
}
extern "C" __attribute__((noipa)) void tcg_region_off() {
  asm volatile("" ::: "memory");
}

namespace {

struct WorkloadCase {
  const char* name;
  ggml_type type;
  bool repack;  // in the CPU_REPACK buffer type
};

constexpr WorkloadCase kWorkloadCases[] = {
    {"q8_0", GGML_TYPE_Q8_0, false},       {"q8_0_repack", GGML_TYPE_Q8_0, true},
    {"q4_0", GGML_TYPE_Q4_0, false},       {"q4_0_repack", GGML_TYPE_Q4_0, true},
    {"q4_1", GGML_TYPE_Q4_1, false},       {"q4_k", GGML_TYPE_Q4_K, false},
    {"q4_k_repack", GGML_TYPE_Q4_K, true}, {"f16", GGML_TYPE_F16, false},
    {"bf16", GGML_TYPE_BF16, false},       {"f32", GGML_TYPE_F32, false},
};

ggml_backend_buffer_type_t repack_buffer_type() {
  ggml_backend_reg_t reg = ggml_backend_cpu_reg();
  auto get_extra = reinterpret_cast<ggml_backend_dev_get_extra_bufts_t>(
      ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts"));
  if (!get_extra) return nullptr;
  for (ggml_backend_buffer_type_t* t = get_extra(ggml_backend_reg_dev_get(reg, 0)); *t; ++t)
    if (std::strcmp(ggml_backend_buft_name(*t), "CPU_REPACK") == 0) return *t;
  return nullptr;
}

// The weights' bytes in the type's layout (before any repacking).
std::vector<uint8_t> weight_bytes(ggml_type type, int64_t rows, int64_t cols) {
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> value(-0.1f, 0.1f);
  std::vector<float> f(static_cast<size_t>(rows * cols));
  for (float& v : f) v = value(rng);
  std::vector<uint8_t> out(ggml_row_size(type, cols) * rows);
  if (type == GGML_TYPE_F32) {
    std::memcpy(out.data(), f.data(), out.size());
  } else if (type == GGML_TYPE_F16) {
    ggml_fp32_to_fp16_row(f.data(), reinterpret_cast<ggml_fp16_t*>(out.data()), rows * cols);
  } else if (type == GGML_TYPE_BF16) {
    ggml_fp32_to_bf16_row(f.data(), reinterpret_cast<ggml_bf16_t*>(out.data()), rows * cols);
  } else {
    ggml_quantize_chunk(type, f.data(), out.data(), 0, rows, cols, nullptr);
  }
  return out;
}

int usage() {
  std::fprintf(stderr,
               "usage: llama_cpp_matmul_workload CASE TOKENS [ROWS COLS] [--calls N]\n  CASE:");
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
  if (tokens < 1 || rows < 1 || cols < 1 || cols % 256 != 0) return usage();

  ggml_backend_t backend = ggml_backend_cpu_init();
  ggml_backend_cpu_set_n_threads(backend, 1);

  // The weight, in its own context and buffer.
  ggml_init_params weight_params{ggml_tensor_overhead() * 2, nullptr, true};
  ggml_context* weight_ctx = ggml_init(weight_params);
  ggml_tensor* w = ggml_new_tensor_2d(weight_ctx, chosen->type, cols, rows);
  ggml_backend_buffer_type_t buft = ggml_backend_cpu_buffer_type();
  if (chosen->repack) {
    buft = repack_buffer_type();
    if (!buft) {
      std::fprintf(stderr, "%s: this ggml has no CPU_REPACK buffer type\n", chosen->name);
      return 3;
    }
  }
  ggml_backend_buffer_t weight_buffer = ggml_backend_alloc_ctx_tensors_from_buft(weight_ctx, buft);
  const std::vector<uint8_t> bytes = weight_bytes(chosen->type, rows, cols);
  ggml_backend_tensor_set(w, bytes.data(), 0, bytes.size());  // repacks in CPU_REPACK

  // x [tokens, cols] and y = x w^T, with the graph.
  ggml_init_params graph_params{ggml_tensor_overhead() * 4 + ggml_graph_overhead(), nullptr, true};
  ggml_context* ctx = ggml_init(graph_params);
  ggml_tensor* x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, cols, tokens);
  ggml_tensor* y = ggml_mul_mat(ctx, w, x);
  ggml_cgraph* graph = ggml_new_graph(ctx);
  ggml_build_forward_expand(graph, y);
  if (chosen->repack && !ggml_backend_supports_op(backend, y)) {
    std::fprintf(stderr, "%s: CPU_REPACK does not take this MUL_MAT\n", chosen->name);
    return 3;
  }
  ggml_backend_buffer_t buffer = ggml_backend_alloc_ctx_tensors(ctx, backend);
  std::vector<float> xs(static_cast<size_t>(tokens * cols));
  std::mt19937 rng(32);
  std::uniform_real_distribution<float> activation(-1.0f, 1.0f);
  for (float& v : xs) v = activation(rng);
  ggml_backend_tensor_set(x, xs.data(), 0, xs.size() * sizeof(float));

  ggml_backend_graph_compute(backend, graph);  // warm-up: the work buffer is sized here
  for (int i = 0; i < calls; ++i) {
    tcg_region_on();
    ggml_backend_graph_compute(backend, graph);
    tcg_region_off();
  }
  std::printf("%s ggml %lld %lld %lld %lld %d\n", chosen->name, static_cast<long long>(tokens),
              static_cast<long long>(rows), static_cast<long long>(cols),
              static_cast<long long>(tokens * rows * cols), calls);

  ggml_backend_buffer_free(buffer);
  ggml_free(ctx);
  ggml_backend_buffer_free(weight_buffer);
  ggml_free(weight_ctx);
  ggml_backend_free(backend);
  return 0;
}
