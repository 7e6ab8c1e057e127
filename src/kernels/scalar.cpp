// The scalar reference table: plain loops, fp32 accumulation, 16-bit weights widened with
// util/half.h, quantized weights dequantized element by element exactly as
// dequantize_row_reference does. Every ISA version is tested against these, so they favour
// being obviously correct over being fast.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/quantize.h"
#include "kernels/tables.h"
#include "util/half.h"

namespace pagoda::detail {
namespace {

// Quantized value (int8, or int4 in [0, 15]) of element (row, col) and its group index.
int quantized_at(const WeightView& w, int64_t row, int64_t col) {
  if (w.dtype == DType::kI8) return static_cast<const int8_t*>(w.data)[row * w.cols + col];
  // kI4: in each run of 32 values byte j holds value j (low nibble) and j + 16 (high nibble).
  const auto* packed = static_cast<const uint8_t*>(w.data) + row * (w.cols / 2);
  const int64_t j = col % 32;
  const uint8_t byte = packed[col / 32 * 16 + j % 16];
  return j < 16 ? byte & 0xf : byte >> 4;
}

float weight_at(const WeightView& w, int64_t index) {
  switch (w.dtype) {
    case DType::kF32:
      return static_cast<const float*>(w.data)[index];
    case DType::kF16:
      return f16_to_f32(static_cast<const f16_t*>(w.data)[index]);
    case DType::kBF16:
      return bf16_to_f32(static_cast<const bf16_t*>(w.data)[index]);
    case DType::kI8:
    case DType::kI4: {
      const int64_t row = index / w.cols, col = index % w.cols;
      const int64_t group = row * (w.cols / w.group_size) + col / w.group_size;
      const float q = static_cast<float>(quantized_at(w, row, col));
      // Same expression as dequantize_row_reference (a product, then a sum: two roundings).
      const float scaled = f16_to_f32(w.scales[group]) * q;
      return w.dtype == DType::kI8 ? scaled : scaled + f16_to_f32(w.mins[group]);
    }
  }
  return 0.0f;
}

// W8A8 / W4A8 (WeightView::int8_activations), the definition every ISA follows. Each token's
// activations are quantized in blocks: d = absmax / 127, q = round-to-nearest-even(x *
// (127 / absmax)) (0 for an all-zero block). The blocks are the weight's groups for int8 (one
// scale per token for per-channel weights, as vLLM's W8A8) and 32 values for int4. Per block
// b of a row in weight group g:
//   int8:  d_b * (scale_g * Σ q_x q_w)
//   int4:  d_b * (scale_g * Σ q_x q_w + min_g * Σ q_x)      (w = scale * q + min)
// with the integer sums exact. ISA versions add the same terms in another order.
int64_t activation_block(const WeightView& w) {
  return w.dtype == DType::kI8 ? w.group_size : 32;
}

void quantize_activation_block(const float* x, int64_t n, int8_t* q, float* d) {
  float absmax = 0.0f;
  for (int64_t i = 0; i < n; ++i) absmax = std::fmax(absmax, std::fabs(x[i]));
  const float inv = absmax > 0.0f ? 127.0f / absmax : 0.0f;
  for (int64_t i = 0; i < n; ++i) q[i] = static_cast<int8_t>(std::nearbyint(x[i] * inv));
  *d = absmax / 127.0f;
}

void matmul_int8_activations(const float* x, int64_t num_tokens, const WeightView& w,
                             int64_t row_begin, int64_t row_end, float* y, int64_t ldy) {
  const int64_t cols = w.cols, block_size = activation_block(w), num_blocks = cols / block_size;
  const int64_t num_groups = cols / w.group_size;
  // Per-thread buffers, grown to the largest call: no allocation per call after warm-up.
  static thread_local std::vector<int8_t> q;
  static thread_local std::vector<float> d;
  q.resize(static_cast<size_t>(cols));
  d.resize(static_cast<size_t>(num_blocks));
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t b = 0; b < num_blocks; ++b) {
      quantize_activation_block(x + t * cols + b * block_size, block_size, &q[b * block_size],
                                &d[b]);
    }
    for (int64_t r = row_begin; r < row_end; ++r) {
      float acc = 0.0f;
      for (int64_t b = 0; b < num_blocks; ++b) {
        int32_t dot = 0, sum_q = 0;
        for (int64_t i = 0; i < block_size; ++i) {
          const int64_t c = b * block_size + i;
          dot += q[c] * quantized_at(w, r, c);
          sum_q += q[c];
        }
        const int64_t group = r * num_groups + b * block_size / w.group_size;
        // Symmetric int4 (w = s (q - 8)) keeps the -8 in the integer sum, as the SIMD tiles do.
        if (w.dtype == DType::kI4 && w.symmetric_int4) dot -= 8 * sum_q;
        float block = f16_to_f32(w.scales[group]) * static_cast<float>(dot);
        if (w.dtype == DType::kI4 && !w.symmetric_int4) {
          block += f16_to_f32(w.mins[group]) * static_cast<float>(sum_q);
        }
        acc += d[b] * block;
      }
      y[t * ldy + r] = acc;
    }
  }
}

void matmul(const float* x, int64_t num_tokens, const WeightView& w, int64_t row_begin,
            int64_t row_end, float* y, int64_t ldy) {
  if (is_quantized(w.dtype) && w.int8_activations) {
    matmul_int8_activations(x, num_tokens, w, row_begin, row_end, y, ldy);
    return;
  }
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* xt = x + t * w.cols;
    for (int64_t r = row_begin; r < row_end; ++r) {
      float acc = 0.0f;
      for (int64_t c = 0; c < w.cols; ++c) acc += xt[c] * weight_at(w, r * w.cols + c);
      y[t * ldy + r] = acc;
    }
  }
}

void rms_norm(const float* x, const float* weight, float eps, int64_t n, float* out) {
  float sum_squares = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum_squares += x[i] * x[i];
  const float inv_rms = 1.0f / std::sqrt(sum_squares / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv_rms * weight[i];
}

void add_rms_norm(float* residual, const float* x, const float* weight, float eps, int64_t n,
                  float* out) {
  for (int64_t i = 0; i < n; ++i) residual[i] += x[i];
  rms_norm(residual, weight, eps, n, out);
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  float max_value = x[0];
  for (int64_t i = 1; i < n; ++i) max_value = std::fmax(max_value, x[i]);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max_value);
    sum += x[i];
  }
  const float inv_sum = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv_sum;
}

float dot(const float* a, const float* b, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

void axpy(float a, const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// Rows stored as a KV cache dtype (kF32, kF16, kBF16), widened exactly.
float cached_at(const void* rows, DType dtype, int64_t index) {
  return weight_at(WeightView{rows, dtype, 1, index + 1}, index);
}

void dot_rows(const float* a, const void* rows, DType rows_dtype, int64_t row_stride,
              int64_t num_rows, int64_t n, float* out) {
  for (int64_t j = 0; j < num_rows; ++j) {
    float acc = 0.0f;
    for (int64_t i = 0; i < n; ++i) acc += a[i] * cached_at(rows, rows_dtype, j * row_stride + i);
    out[j] = acc;
  }
}

void axpy_rows(const float* coeffs, const void* rows, DType rows_dtype, int64_t row_stride,
               int64_t num_rows, int64_t n, float* y) {
  for (int64_t j = 0; j < num_rows; ++j) {
    for (int64_t i = 0; i < n; ++i)
      y[i] += coeffs[j] * cached_at(rows, rows_dtype, j * row_stride + i);
  }
}

void attention_scores(const float* q, int64_t ldq, int64_t num_q, const void* rows,
                      DType rows_dtype, int64_t row_stride, int64_t num_rows, int64_t n, float* s,
                      int64_t lds) {
  for (int64_t i = 0; i < num_q; ++i)
    dot_rows(q + i * ldq, rows, rows_dtype, row_stride, num_rows, n, s + i * lds);
}

void attention_values(const float* p, int64_t ldp, int64_t num_q, const float* row_scale,
                      const void* const* blocks, int64_t block_rows, DType rows_dtype,
                      int64_t row_stride, int64_t num_rows, int64_t n, float* acc, int64_t lda) {
  for (int64_t i = 0; i < num_q; ++i) {
    for (int64_t d = 0; d < n; ++d) acc[i * lda + d] *= row_scale[i];
    for (int64_t j = 0; j < num_rows; j += block_rows) {
      axpy_rows(p + i * ldp + j, blocks[j / block_rows], rows_dtype, row_stride,
                std::min(block_rows, num_rows - j), n, acc + i * lda);
    }
  }
}

void rope(const float* x, const float* cos, const float* sin, int64_t rotary_dim, bool neox,
          float* out) {
  const int64_t half = rotary_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    // neox (HF rotate_half): pair i with i + half; GPT-J: pair 2i with 2i + 1.
    const int64_t i0 = neox ? i : 2 * i;
    const int64_t i1 = neox ? i + half : 2 * i + 1;
    // Both read before either is written, so out == x is safe.
    const float a = x[i0];
    const float b = x[i1];
    out[i0] = a * cos[i] - b * sin[i];
    out[i1] = b * cos[i] + a * sin[i];
  }
}

void to_f32(const void* src, DType dtype, int64_t n, float* dst) {
  const WeightView view{src, dtype, 1, n};
  for (int64_t i = 0; i < n; ++i) dst[i] = weight_at(view, i);
}

void from_f32(const float* src, DType dtype, int64_t n, void* dst) {
  for (int64_t i = 0; i < n; ++i) {
    if (dtype == DType::kF32) static_cast<float*>(dst)[i] = src[i];
    if (dtype == DType::kF16) static_cast<f16_t*>(dst)[i] = f32_to_f16(src[i]);
    if (dtype == DType::kBF16) static_cast<bf16_t*>(dst)[i] = f32_to_bf16(src[i]);
  }
}

float exp_shifted(float* x, float shift, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - shift);
    sum += x[i];
  }
  return sum;
}

}  // namespace

const KernelTable& scalar_table() {
  static const KernelTable table = [] {
    KernelTable t;
    t.isa = "scalar";
    t.matmul = matmul;
    t.rms_norm = rms_norm;
    t.add_rms_norm = add_rms_norm;
    t.silu_mul = silu_mul;
    t.softmax = softmax;
    t.dot = dot;
    t.axpy = axpy;
    t.dot_rows = dot_rows;
    t.axpy_rows = axpy_rows;
    t.attention_scores = attention_scores;
    t.attention_values = attention_values;
    t.rope = rope;
    t.to_f32 = to_f32;
    t.from_f32 = from_f32;
    t.dequantize_row = dequantize_row_reference;
    t.exp_shifted = exp_shifted;
    return t;
  }();
  return table;
}

}  // namespace pagoda::detail
