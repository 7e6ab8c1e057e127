// Splits each op's work across OpenMP threads; the arithmetic is the kernel table's.
#include "kernels/ops.h"

#include <omp.h>

#include <algorithm>

namespace pagoda::ops {
namespace {

// Below this much work (multiply-adds or elements) a parallel region costs more than it saves
// (fork/join is a few microseconds).
constexpr int64_t kMinParallelMacs = 1 << 16;
constexpr int64_t kMinParallelElements = 1 << 14;
constexpr int64_t kRowAlign = 16;

int available_threads() {
  return omp_in_parallel() ? 1 : omp_get_max_threads();
}

}  // namespace

void matmul(const float* x, int64_t num_tokens, const WeightView& w, float* y, int64_t ldy) {
  const int64_t rows = w.rows, cols = w.cols;
  const int num_threads = available_threads();
  // Splitting rows lets each thread stream (and widen) only its own part of W, which is what
  // matters when W is large; split tokens only when the rows are too few to share out.
  const bool split_tokens = num_threads > 1 && num_tokens * rows * cols >= kMinParallelMacs &&
                            rows < 4 * kRowAlign * num_threads && num_tokens >= num_threads;
  if (!split_tokens) {
    const MatmulJob job{x, num_tokens, &w, y, ldy};
    matmul_batch({&job, 1});
    return;
  }
  const KernelTable& k = kernels();
#pragma omp parallel num_threads(num_threads)
  {
    const int64_t part = omp_get_thread_num(), num_parts = omp_get_num_threads();
    const int64_t per = (num_tokens + num_parts - 1) / num_parts;
    const int64_t begin = part * per, end = std::min(num_tokens, begin + per);
    if (begin < end) k.matmul(x + begin * cols, end - begin, w, 0, rows, y + begin * ldy, ldy);
  }
}

void matmul_batch(std::span<const MatmulJob> jobs) {
  const KernelTable& k = kernels();
  int64_t macs = 0;
  for (const MatmulJob& j : jobs) macs += j.num_tokens * j.w->rows * j.w->cols;
  const int num_threads = available_threads();
  if (num_threads <= 1 || macs < kMinParallelMacs) {
    for (const MatmulJob& j : jobs) k.matmul(j.x, j.num_tokens, *j.w, 0, j.w->rows, j.y, j.ldy);
    return;
  }
#pragma omp parallel num_threads(num_threads)
  {
    const int64_t part = omp_get_thread_num(), num_parts = omp_get_num_threads();
    for (const MatmulJob& j : jobs) {
      const int64_t rows = j.w->rows;
      const int64_t per =
          ((rows + num_parts - 1) / num_parts + kRowAlign - 1) / kRowAlign * kRowAlign;
      const int64_t begin = part * per, end = std::min(rows, begin + per);
      if (begin < end) k.matmul(j.x, j.num_tokens, *j.w, begin, end, j.y, j.ldy);
    }
  }
}

void rms_norm_rows(const float* x, const float* weight, float eps, int64_t num_rows, int64_t n,
                   float* out) {
  const KernelTable& k = kernels();
#pragma omp parallel for if (num_rows > 1 && num_rows * n >= kMinParallelElements && \
                             !omp_in_parallel())
  for (int64_t i = 0; i < num_rows; ++i) k.rms_norm(x + i * n, weight, eps, n, out + i * n);
}

void add_rms_norm_rows(float* residual, const float* x, const float* weight, float eps,
                       int64_t num_rows, int64_t n, float* out) {
  const KernelTable& k = kernels();
#pragma omp parallel for if (num_rows > 1 && num_rows * n >= kMinParallelElements && \
                             !omp_in_parallel())
  for (int64_t i = 0; i < num_rows; ++i) {
    k.add_rms_norm(residual + i * n, x + i * n, weight, eps, n, out + i * n);
  }
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  const KernelTable& k = kernels();
  const int num_threads = available_threads();
  if (num_threads <= 1 || n < kMinParallelElements) {
    k.silu_mul(gate, up, n, out);
    return;
  }
#pragma omp parallel num_threads(num_threads)
  {
    const int64_t part = omp_get_thread_num(), num_parts = omp_get_num_threads();
    const int64_t per = ((n + num_parts - 1) / num_parts + kRowAlign - 1) / kRowAlign * kRowAlign;
    const int64_t begin = part * per, end = std::min(n, begin + per);
    if (begin < end) k.silu_mul(gate + begin, up + begin, end - begin, out + begin);
  }
}

void silu_mul_fused(const float* gate_up, int64_t num_rows, int64_t n, float* out) {
  const KernelTable& k = kernels();
#pragma omp parallel for if (num_rows > 1 && num_rows * n >= kMinParallelElements && \
                             !omp_in_parallel())
  for (int64_t i = 0; i < num_rows; ++i) {
    k.silu_mul(gate_up + i * 2 * n, gate_up + i * 2 * n + n, n, out + i * n);
  }
}

void embedding_lookup(const WeightView& table, const int32_t* ids, int64_t num_tokens, float* out) {
  const KernelTable& k = kernels();
  if (is_quantized(table.dtype)) {  // a GGUF table: dequantize the rows that are looked up
    for (int64_t i = 0; i < num_tokens; ++i) {
      k.dequantize_row(table, ids[i], out + i * table.cols);
    }
    return;
  }
  const auto* base = static_cast<const char*>(table.data);
  const int64_t row_bytes = table.cols * dtype_size(table.dtype);
  for (int64_t i = 0; i < num_tokens; ++i) {
    k.to_f32(base + ids[i] * row_bytes, table.dtype, table.cols, out + i * table.cols);
  }
}

}  // namespace pagoda::ops
