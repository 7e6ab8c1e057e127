// Token embedding: a table row per token id, widened to fp32 (any stored type, quantized
// included). The table is kept as stored: it is read a row at a time, never multiplied.
#pragma once

#include <cstdint>
#include <string>

#include "device/execution_context.h"
#include "kernels/kernels.h"

namespace pagoda {

class WeightLoader;

struct Embedding {
  WeightView table;  // [vocab, hidden]

  static Embedding load(WeightLoader& loader, const std::string& name, int64_t vocab,
                        int64_t hidden);

  // out [num_tokens, hidden]. ids were checked against the vocabulary at the edge.
  void forward(const ExecutionContext& ctx, const int32_t* ids, int64_t num_tokens,
               float* out) const;
};

}  // namespace pagoda
