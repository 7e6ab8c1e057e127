// The scalar reference table: plain loops, fp32 accumulation, 16-bit weights widened with
// util/half.h. Every ISA version is tested against these, so they favour being obviously
// correct over being fast.
#include <cmath>

#include "kernels/tables.h"
#include "util/half.h"

namespace pagoda::detail {
namespace {

float weight_at(const WeightView& w, int64_t index) {
  switch (w.dtype) {
    case DType::kF32:
      return static_cast<const float*>(w.data)[index];
    case DType::kF16:
      return f16_to_f32(static_cast<const f16_t*>(w.data)[index]);
    case DType::kBF16:
      return bf16_to_f32(static_cast<const bf16_t*>(w.data)[index]);
  }
  return 0.0f;
}

void matmul(const float* x, int64_t num_tokens, const WeightView& w, int64_t row_begin,
            int64_t row_end, float* y, int64_t ldy) {
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

void rope(float* x, const float* cos, const float* sin, int64_t rotary_dim, bool neox) {
  const int64_t half = rotary_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    // neox (HF rotate_half): pair i with i + half; GPT-J: pair 2i with 2i + 1.
    const int64_t i0 = neox ? i : 2 * i;
    const int64_t i1 = neox ? i + half : 2 * i + 1;
    const float a = x[i0];
    const float b = x[i1];
    x[i0] = a * cos[i] - b * sin[i];
    x[i1] = b * cos[i] + a * sin[i];
  }
}

void to_f32(const void* src, DType dtype, int64_t n, float* dst) {
  const WeightView view{src, dtype, 1, n};
  for (int64_t i = 0; i < n; ++i) dst[i] = weight_at(view, i);
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
    t.isa = Isa::kScalar;
    t.matmul = matmul;
    t.rms_norm = rms_norm;
    t.add_rms_norm = add_rms_norm;
    t.silu_mul = silu_mul;
    t.softmax = softmax;
    t.dot = dot;
    t.axpy = axpy;
    t.rope = rope;
    t.to_f32 = to_f32;
    t.exp_shifted = exp_shifted;
    return t;
  }();
  return table;
}

}  // namespace pagoda::detail
