// The residual connection of a decoder layer: h += x.
#pragma once

#include <cstdint>

#include "device/execution_context.h"

namespace pagoda {

// residual[i] += x[i] for n values, on the calling thread (memory-bound and short: one pass
// over [T, hidden] per layer).
inline void add_residual(const ExecutionContext& ctx, float* residual, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) residual[i] += x[i];
}

}  // namespace pagoda
