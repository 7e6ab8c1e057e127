// Token embedding: a table row per token id, widened to fp32 (any stored type, quantized
// included). The table is kept as stored: it is read a row at a time, never multiplied.
#pragma once

#include <cstdint>
#include <string>

#include "device/execution_context.h"
#include "kernels/kernels.h"
#include "model/tensor_parallel.h"

namespace pagoda {

class WeightLoader;

// Vocabulary-parallel (Megatron-LM's VocabParallelEmbedding): each rank holds the rows of its
// vocabulary range, looks up the ids that fall in it, writes zeros for the others, and the ranks
// sum their rows: exactly one rank contributes each token's row, so the sum is that row.
struct Embedding {
  WeightView table;      // [vocab, hidden], or this rank's rows [vocab_range.count, hidden]
  DimShard vocab_range;  // the ids this rank holds
  Communicator* reduce = nullptr;  // sums the ranks' rows; nullptr on one rank

  static Embedding load(WeightLoader& loader, const std::string& name, int64_t vocab,
                        int64_t hidden);
  // This rank's vocabulary range (TensorParallel::padded_split) of the table.
  static Embedding load_sharded(WeightLoader& loader, const std::string& name, int64_t vocab,
                                int64_t hidden, const TensorParallel& tp);

  // out [num_tokens, hidden]. ids were checked against the vocabulary at the edge.
  void forward(const ExecutionContext& ctx, const int32_t* ids, int64_t num_tokens,
               float* out) const;
};

}  // namespace pagoda
