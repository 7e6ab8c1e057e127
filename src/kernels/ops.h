// The threaded layer the model layers call: each op splits its work across the OpenMP threads
// (the CLI sets their number from --threads) and runs a kernel table on each share: the one
// given first (the execution context's, device/execution_context.h), or the process-wide
// kernels() in the overloads without one. Ops called from inside a parallel region run on the
// calling thread only.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/kernels.h"

namespace pagoda::ops {

// y[t, r] = sum_c x[t, c] * W[r, c]: x [num_tokens, w.cols], y [num_tokens, ldy] (ldy >= w.rows,
// so several projections can write side by side into one buffer). Output rows are split
// across threads in chunks aligned to 16; when there are few rows and many tokens the tokens
// are split instead.
void matmul(const float* x, int64_t num_tokens, const WeightView& w, float* y, int64_t ldy);
inline void matmul(const float* x, int64_t num_tokens, const WeightView& w, float* y) {
  matmul(x, num_tokens, w, y, w.rows);
}

// One y = x W^T of matmul_batch: x [num_tokens, w->cols], y [num_tokens, ldy].
struct MatmulJob {
  const float* x;
  int64_t num_tokens;
  const WeightView* w;
  float* y;
  int64_t ldy;
};
// Independent matmuls in one parallel region: the same results as one matmul call per job,
// with one fork/join instead of one per job. Each thread has a share of every job's rows (as
// matmul splits them); below 4 tokens a thread done with its share takes the chunks of rows
// the others have not reached. Jobs on one x quantize it once per thread (W8A8/W4A8). Decode is a
// chain of small matmuls (q/k/v, gate/up, a layer's experts), where each region's start and
// end-of-region wait cost a noticeable share of the matmul itself.
void matmul_batch(std::span<const MatmulJob> jobs);

// out[i, :] = rms_norm(x[i, :]) * weight for num_rows rows of n values (row stride n).
void rms_norm_rows(const float* x, const float* weight, float eps, int64_t num_rows, int64_t n,
                   float* out);
// residual[i, :] += x[i, :]; out[i, :] = rms_norm(residual[i, :]) * weight.
void add_rms_norm_rows(float* residual, const float* x, const float* weight, float eps,
                       int64_t num_rows, int64_t n, float* out);
// out[i] = silu(gate[i]) * up[i] over n values (any number of rows laid end to end).
void silu_mul(const float* gate, const float* up, int64_t n, float* out);
// Like silu_mul, for a fused gate_up projection: gate_up [num_rows, 2 * n] holds gate in the
// first n columns and up in the last n; out is [num_rows, n].
void silu_mul_fused(const float* gate_up, int64_t num_rows, int64_t n, float* out);
// out[i, :] = table[ids[i], :] widened to fp32; table is [rows, cols]. ids are not checked
// here: the caller validated them against the vocabulary at the edge.
void embedding_lookup(const WeightView& table, const int32_t* ids, int64_t num_tokens, float* out);

// The ops above on an explicit kernel table.
void matmul(const KernelTable& k, const float* x, int64_t num_tokens, const WeightView& w, float* y,
            int64_t ldy);
void matmul_batch(const KernelTable& k, std::span<const MatmulJob> jobs);
void rms_norm_rows(const KernelTable& k, const float* x, const float* weight, float eps,
                   int64_t num_rows, int64_t n, float* out);
void add_rms_norm_rows(const KernelTable& k, float* residual, const float* x, const float* weight,
                       float eps, int64_t num_rows, int64_t n, float* out);
void silu_mul(const KernelTable& k, const float* gate, const float* up, int64_t n, float* out);
void silu_mul_fused(const KernelTable& k, const float* gate_up, int64_t num_rows, int64_t n,
                    float* out);
void embedding_lookup(const KernelTable& k, const WeightView& table, const int32_t* ids,
                      int64_t num_tokens, float* out);

}  // namespace pagoda::ops
