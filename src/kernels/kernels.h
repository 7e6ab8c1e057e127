// The kernel table: every hot numerical routine as a function pointer, filled once at
// start-up for the best ISA this CPU has (the scalar reference; AVX2, AVX-512 on x86-64; NEON,
// NEON with the dot product on AArch64). A new ISA is one file (e.g. x86/avx512.cpp) plus one
// entry in its architecture's variant list (x86/variants.cpp, arm/variants.cpp).
//
// Conventions: activations are fp32, row-major; weights are row-major [rows, cols] in their
// stored dtype; a kernel works on a caller-chosen range of output rows so the caller (ops.h)
// can split work across threads. Kernels never allocate per call on the hot path.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "util/dtype.h"

namespace pagoda {

// How lane panels (kernels/lane_panels.h) lay out a matrix: `rows` rows per panel, and
// `row_bytes` consecutive int8 values of a row kept together, so that one vector load is what
// one kernel's instruction takes (x86 vpmaddwd: 16 rows x 2 bytes; AArch64 sdot by element: 4
// rows x 4 bytes; smmla: 4 rows x 8 bytes). int4 panels of a layout hold the same int8 operands
// two to a byte (one load and a shift or mask gives each). rows == 0: no panels.
struct LanePanelLayout {
  int64_t rows = 0;
  int64_t row_bytes = 0;
  constexpr explicit operator bool() const { return rows > 0; }
  bool operator==(const LanePanelLayout&) const = default;
};

// A weight matrix W of shape [rows, cols] (rows = output features), stored row-major.
// Quantized layouts (kI8, kI4; util/dtype.h) carry their fp16 scale planes alongside.
struct WeightView {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  // kI8 / kI4 only: fp16 [rows, cols / group_size]; mins only for kI4 (w = scale * q + min).
  const uint16_t* scales = nullptr;
  const uint16_t* mins = nullptr;
  int64_t group_size = 0;
  // kI8 / kI4 only: compute with int8 activations (quantized per token in blocks of 32 on the
  // fly, integer dot products: W8A8 / W4A8) instead of widening the weights to fp32.
  bool int8_activations = false;
  // kI4 only: every min is exactly -8 * its scale in fp32 (GGUF Q4_0, symmetric GPTQ: w =
  // scale * (q - 8)), so the W4A8 kernels subtract 8 * sum(q_x) inside each block's integer
  // sum instead of adding a float min term, and never read the mins plane: an eighth less to
  // stream at group 32 (weight-only paths still read it).
  // Set where symmetric_int4_mins() (kernels/quantize.h) holds.
  bool symmetric_int4 = false;
  // kI8 / kI4 with int8_activations only: the weights repacked at load into lane panels of
  // lane_panel_layout, values, scales and (asymmetric kI4) mins (kernels/lane_panels.h), for
  // the tables whose KernelTable::int8_lane_panels / int4_lane_panels names that layout; data,
  // scales and mins are then null. Other tables' matmul never sees such a view (the loader
  // packs for the table it computes with); dequantize_row reads it on every table, in any
  // layout.
  const int8_t* lane_panels = nullptr;
  LanePanelLayout lane_panel_layout{};
};

// The largest |w| of an f16 weight that fp16 arithmetic (KernelTable::f16_arithmetic) multiplies
// without overflow: x is scaled into [8, 16) and runs of 8 products are added in fp16, so
// 8 * 16 * 511 = 65408 stays below fp16's largest value, 65504.
inline constexpr float kF16ArithmeticMaxWeight = 511.0f;

struct KernelTable {
  const char* isa = "scalar";  // the variant's name, as --isa takes it
  // True when matmul on bf16 weights rounds the activations to bf16 too (AVX-512 vdpbf16ps):
  // each product then carries up to 2^-8 relative error. fp32 and f16 weights never do.
  bool matmul_bf16_activations = false;
  // True when matmul on f16 weights and dot_rows on f16 rows multiply in fp16 (AArch64 with
  // +fp16, arm/fp16_kernels.h): x scaled by a power of two and rounded to fp16, runs of 8
  // products per lane summed in fp16, then in fp32: within 10 * 2^-11 * sum|x w| (plus
  // 2^-25 * 2^k per step near fp16's subnormals, 2^k the scale), not widened exactly.
  // Products of weights up to kF16ArithmeticMaxWeight in magnitude stay finite; the loader
  // widens f16 matrices with larger weights to fp32. axpy_rows and attention_values on f16
  // rows likewise (arm/fp16_values.h), with the coefficients scaled into [1/32, 1/16) so that
  // any finite cache value stays finite: within 10 * 2^-11 * sum|c v| plus 2^-20 * max|c| per
  // step near the subnormals.
  bool f16_arithmetic = false;
  // Set (the layout the kernels read) when matmul on kI8 W8A8 weights reads
  // WeightView::lane_panels in that layout, and reads them for every token count: the loader
  // then packs int8 matrices once (x86 without AVX512_VNNI: 16 x 2; AArch64 with the dot
  // product: 4 x 4, with i8mm: 4 x 8). Unset: row-major int8.
  LanePanelLayout int8_lane_panels{};
  // The same for kI4 W4A8 weights (AArch64 with the dot product: 4 x 4, with i8mm: 4 x 8;
  // arm/int4_panels.h). Unset: row-major int4.
  LanePanelLayout int4_lane_panels{};
  // The layout the loader packs W8A8 / W4A8 weights of `dtype` into (unset: none).
  LanePanelLayout lane_panel_layout(DType dtype) const {
    return dtype == DType::kI8   ? int8_lane_panels
           : dtype == DType::kI4 ? int4_lane_panels
                                 : LanePanelLayout{};
  }

  // y[t, r] = sum_c x[t, c] * W[r, c] for t in [0, num_tokens), r in [row_begin, row_end).
  // x is [num_tokens, W.cols] (row stride W.cols); y has row stride ldy. Every dtype,
  // including kI8/kI4 with or without int8_activations.
  void (*matmul)(const float* x, int64_t num_tokens, const WeightView& w, int64_t row_begin,
                 int64_t row_end, float* y, int64_t ldy) = nullptr;

  // out = x / rms(x) * weight, n values.
  void (*rms_norm)(const float* x, const float* weight, float eps, int64_t n, float* out) = nullptr;
  // Fused residual add + norm: residual += x; out = rms_norm(residual).
  void (*add_rms_norm)(float* residual, const float* x, const float* weight, float eps, int64_t n,
                       float* out) = nullptr;
  // out[i] = silu(gate[i]) * up[i].
  void (*silu_mul)(const float* gate, const float* up, int64_t n, float* out) = nullptr;
  // In-place numerically stable softmax over n values.
  void (*softmax)(float* x, int64_t n) = nullptr;
  float (*dot)(const float* a, const float* b, int64_t n) = nullptr;
  // y += a * x
  void (*axpy)(float a, const float* x, int64_t n, float* y) = nullptr;
  // Attention over a block of cached rows (row j at element j * row_stride of rows, stored as
  // rows_dtype: kF32, kF16 or kBF16, the KV cache dtypes, widened exactly to fp32), bit for bit
  // what the one-row calls give on the widened rows, but with each row loaded once for all the
  // work on it: out[j] = dot(a, row j, n) for j < num_rows; and y += coeffs[j] * row j for
  // j = 0, 1, ... in that order (axpy per row, with y held in registers across the rows).
  void (*dot_rows)(const float* a, const void* rows, DType rows_dtype, int64_t row_stride,
                   int64_t num_rows, int64_t n, float* out) = nullptr;
  void (*axpy_rows)(const float* coeffs, const void* rows, DType rows_dtype, int64_t row_stride,
                    int64_t num_rows, int64_t n, float* y) = nullptr;
  // Prefill attention tiles (attention.cpp), rows as for dot_rows: s[i * lds + j] = q_i . row_j
  // over n dims for i < num_q (q_i at q + i * ldq) and j < num_rows; and acc_i = acc_i *
  // row_scale[i] + sum_j p[i * ldp + j] * row_j for j = 0, 1, ... in that order (acc_i at acc +
  // i * lda, n wide), where the values' row j is row j % block_rows of blocks[j / block_rows]
  // (a key tile of several cache blocks in one call). Register-blocked: each loaded row serves
  // several query rows. Each output element sees the same operations in the same order whatever
  // num_q, num_rows and block_rows are, so a query row's result does not depend on the rows
  // tiled with it.
  void (*attention_scores)(const float* q, int64_t ldq, int64_t num_q, const void* rows,
                           DType rows_dtype, int64_t row_stride, int64_t num_rows, int64_t n,
                           float* s, int64_t lds) = nullptr;
  void (*attention_values)(const float* p, int64_t ldp, int64_t num_q, const float* row_scale,
                           const void* const* blocks, int64_t block_rows, DType rows_dtype,
                           int64_t row_stride, int64_t num_rows, int64_t n, float* acc,
                           int64_t lda) = nullptr;
  // Rotary embedding of one head vector's leading rotary_dim dims, written to out; out may be
  // x (in place) but must not overlap it otherwise, and out's dims past rotary_dim are left
  // alone. Out of place so a rotated k can go straight into its cache slot (write_kv_rope).
  // cos/sin hold rotary_dim/2 values for this position. neox=true pairs (i, i + rotary_dim/2)
  // (HF rotate_half); neox=false pairs (2i, 2i+1) (interleaved, GPT-J style).
  void (*rope)(const float* x, const float* cos, const float* sin, int64_t rotary_dim, bool neox,
               float* out) = nullptr;
  // Widen one row of a stored float tensor to fp32 (embedding lookup, norm weights).
  void (*to_f32)(const void* src, DType dtype, int64_t n, float* dst) = nullptr;
  // Narrow n fp32 values to kF32 (a copy), kF16 or kBF16, rounding to nearest even, as
  // util/half.h does (the KV cache write). Other dtypes are not written.
  void (*from_f32)(const float* src, DType dtype, int64_t n, void* dst) = nullptr;
  // Row `row` of any weight (quantized included) as fp32 (embedding lookup of a quantized table).
  void (*dequantize_row)(const WeightView& w, int64_t row, float* dst) = nullptr;
  // x[i] = exp(x[i] - shift) in place; returns the sum of the results (online softmax in
  // attention: shift is the running maximum).
  float (*exp_shifted)(float* x, float shift, int64_t n) = nullptr;
};

// The table for the best ISA this CPU supports (or the one forced with set_kernel_isa).
const KernelTable& kernels();
// Every ISA this build has kernels for (whether or not this CPU runs them), best first;
// "scalar" is always there.
std::vector<std::string> kernel_isa_names();
// The table for one ISA, or nullptr if this build has none of that name or this CPU cannot
// run it. Tests compare each to scalar.
const KernelTable* kernels_for(std::string_view isa);
// Force an ISA (e.g. `--isa scalar` for debugging); throws pagoda::Error if this build has no
// such ISA (the message lists those it has) or this CPU cannot run it.
void set_kernel_isa(std::string_view isa);

}  // namespace pagoda
