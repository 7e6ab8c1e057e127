// Splits each op's work across OpenMP threads; the arithmetic is the kernel table's.
#include "kernels/ops.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <utility>

#include "kernels/activation_reuse.h"

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

// Thread `part`'s share of `rows` (of num_parts): [begin, end), 16-aligned, maybe empty.
std::pair<int64_t, int64_t> share_of(int64_t rows, int64_t part, int64_t num_parts) {
  const int64_t per = ((rows + num_parts - 1) / num_parts + kRowAlign - 1) / kRowAlign * kRowAlign;
  return {std::min(rows, part * per), std::min(rows, (part + 1) * per)};
}

// Few tokens (decode) hand rows out in chunks (matmul_batch): below this many tokens, and
// chunks of about this many weights (~64 KB of int4, a few microseconds of streaming: the
// wait a chunk can leave at the end, against a counter's cost per chunk).
constexpr int64_t kChunkedTokens = 4;
constexpr int64_t kChunkWeights = int64_t{1} << 17;

int64_t chunk_rows(const WeightView& w) {
  const int64_t rows = (kChunkWeights / w.cols + kRowAlign / 2) / kRowAlign * kRowAlign;
  return std::max(kRowAlign, rows);
}

// A thread's share of all the jobs, as one list of chunks (job by job, rows in order), and
// the next chunk of it to take; on its own cache line, so its owner takes chunks without
// contention until another thread comes to help.
struct alignas(64) ShareCursor {
  std::atomic<int64_t> next_chunk{0};
};

// The cursors of one matmul_batch call, one per thread, grown rarely and owned by the calling
// thread (two engines on two threads never share them).
ShareCursor* share_cursors(int num_threads) {
  thread_local std::unique_ptr<ShareCursor[]> cursors;
  thread_local int capacity = 0;
  if (capacity < num_threads) {
    cursors = std::make_unique<ShareCursor[]>(static_cast<size_t>(num_threads));
    capacity = num_threads;
  }
  for (int i = 0; i < num_threads; ++i) cursors[i].next_chunk.store(0, std::memory_order_relaxed);
  return cursors.get();
}

// Runs chunk `chunk` of thread `owner`'s share; false when the share has no such chunk.
bool run_chunk(std::span<const MatmulJob> jobs, int64_t owner, int64_t num_parts, int64_t chunk,
               const KernelTable& k) {
  for (const MatmulJob& j : jobs) {
    const auto [begin, end] = share_of(j.w->rows, owner, num_parts);
    const int64_t step = chunk_rows(*j.w), count = (end - begin + step - 1) / step;
    if (chunk < count) {
      const int64_t first = begin + chunk * step;
      k.matmul(j.x, j.num_tokens, *j.w, first, std::min(end, first + step), j.y, j.ldy);
      return true;
    }
    chunk -= count;
  }
  return false;
}

}  // namespace

void matmul(const KernelTable& k, const float* x, int64_t num_tokens, const WeightView& w, float* y,
            int64_t ldy) {
  const int64_t rows = w.rows, cols = w.cols;
  const int num_threads = available_threads();
  // Splitting rows lets each thread stream (and widen) only its own part of W, which is what
  // matters when W is large; split tokens only when the rows are too few to share out.
  const bool split_tokens = num_threads > 1 && num_tokens * rows * cols >= kMinParallelMacs &&
                            rows < 4 * kRowAlign * num_threads && num_tokens >= num_threads;
  if (!split_tokens) {
    const MatmulJob job{x, num_tokens, &w, y, ldy};
    matmul_batch(k, {&job, 1});
    return;
  }
#pragma omp parallel num_threads(num_threads)
  {
    const int64_t part = omp_get_thread_num(), num_parts = omp_get_num_threads();
    const int64_t per = (num_tokens + num_parts - 1) / num_parts;
    const int64_t begin = part * per, end = std::min(num_tokens, begin + per);
    if (begin < end) k.matmul(x + begin * cols, end - begin, w, 0, rows, y + begin * ldy, ldy);
  }
}

void matmul_batch(const KernelTable& k, std::span<const MatmulJob> jobs) {
  int64_t macs = 0;
  for (const MatmulJob& j : jobs) macs += j.num_tokens * j.w->rows * j.w->cols;
  const int num_threads = available_threads();
  if (num_threads <= 1 || macs < kMinParallelMacs) {
    for (const MatmulJob& j : jobs) k.matmul(j.x, j.num_tokens, *j.w, 0, j.w->rows, j.y, j.ldy);
    return;
  }
  int64_t max_tokens = 0;
  for (const MatmulJob& j : jobs) max_tokens = std::max(max_tokens, j.num_tokens);
  if (max_tokens >= kChunkedTokens) {
    // Many tokens: one share per thread and job. Each call also prepares per-call state that
    // chunks would prepare again: the int8 panels' biases, −128·Σx per token and group.
#pragma omp parallel num_threads(num_threads)
    {
      const ActivationReuseScope reuse;  // jobs on one x (q, k, v) quantize it once
      const int64_t part = omp_get_thread_num(), num_parts = omp_get_num_threads();
      for (const MatmulJob& j : jobs) {
        const auto [begin, end] = share_of(j.w->rows, part, num_parts);
        if (begin < end) k.matmul(j.x, j.num_tokens, *j.w, begin, end, j.y, j.ldy);
      }
    }
    return;
  }
  // Few tokens: a thread works through its own share chunk by chunk, then takes the chunks
  // the others have not reached. On a shared machine one thread is often slowed by a
  // neighbour; with fixed shares the other waited for it at the join (~6% of a Q4_0
  // decode's matmul time, docs/kernels.md). The shares stay contiguous, so a thread streams its
  // rows in order until it helps, and every row gets the same bits whoever computes it.
  ShareCursor* cursors = share_cursors(num_threads);
#pragma omp parallel num_threads(num_threads)
  {
    const ActivationReuseScope reuse;  // chunks on one x quantize it once per thread
    const int64_t part = omp_get_thread_num(), num_parts = omp_get_num_threads();
    for (int64_t i = 0; i < num_parts; ++i) {
      const int64_t owner = (part + i) % num_parts;
      std::atomic<int64_t>& next = cursors[owner].next_chunk;
      while (run_chunk(jobs, owner, num_parts, next.fetch_add(1, std::memory_order_relaxed), k)) {
      }
    }
  }
}

void rms_norm_rows(const KernelTable& k, const float* x, const float* weight, float eps,
                   int64_t num_rows, int64_t n, float* out) {
#pragma omp parallel for if (num_rows > 1 && num_rows * n >= kMinParallelElements && \
                             !omp_in_parallel())
  for (int64_t i = 0; i < num_rows; ++i) k.rms_norm(x + i * n, weight, eps, n, out + i * n);
}

void add_rms_norm_rows(const KernelTable& k, float* residual, const float* x, const float* weight,
                       float eps, int64_t num_rows, int64_t n, float* out) {
#pragma omp parallel for if (num_rows > 1 && num_rows * n >= kMinParallelElements && \
                             !omp_in_parallel())
  for (int64_t i = 0; i < num_rows; ++i) {
    k.add_rms_norm(residual + i * n, x + i * n, weight, eps, n, out + i * n);
  }
}

void silu_mul(const KernelTable& k, const float* gate, const float* up, int64_t n, float* out) {
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

void silu_mul_fused(const KernelTable& k, const float* gate_up, int64_t num_rows, int64_t n,
                    float* out) {
#pragma omp parallel for if (num_rows > 1 && num_rows * n >= kMinParallelElements && \
                             !omp_in_parallel())
  for (int64_t i = 0; i < num_rows; ++i) {
    k.silu_mul(gate_up + i * 2 * n, gate_up + i * 2 * n + n, n, out + i * n);
  }
}

void embedding_lookup(const KernelTable& k, const WeightView& table, const int32_t* ids,
                      int64_t num_tokens, float* out) {
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

// The same ops on the process-wide table.
void matmul(const float* x, int64_t num_tokens, const WeightView& w, float* y, int64_t ldy) {
  matmul(kernels(), x, num_tokens, w, y, ldy);
}

void matmul_batch(std::span<const MatmulJob> jobs) {
  matmul_batch(kernels(), jobs);
}

void rms_norm_rows(const float* x, const float* weight, float eps, int64_t num_rows, int64_t n,
                   float* out) {
  rms_norm_rows(kernels(), x, weight, eps, num_rows, n, out);
}

void add_rms_norm_rows(float* residual, const float* x, const float* weight, float eps,
                       int64_t num_rows, int64_t n, float* out) {
  add_rms_norm_rows(kernels(), residual, x, weight, eps, num_rows, n, out);
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  silu_mul(kernels(), gate, up, n, out);
}

void silu_mul_fused(const float* gate_up, int64_t num_rows, int64_t n, float* out) {
  silu_mul_fused(kernels(), gate_up, num_rows, n, out);
}

void embedding_lookup(const WeightView& table, const int32_t* ids, int64_t num_tokens, float* out) {
  embedding_lookup(kernels(), table, ids, num_tokens, out);
}

}  // namespace pagoda::ops
