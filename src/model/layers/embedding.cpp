#include "model/layers/embedding.h"

#include <algorithm>

#include "kernels/ops.h"
#include "model/weights.h"

namespace pagoda {

Embedding Embedding::load(WeightLoader& loader, const std::string& name, int64_t vocab,
                          int64_t hidden) {
  Embedding e;
  e.table = loader.matrix_as_stored(name, vocab, hidden);
  e.vocab_range = {0, vocab};
  return e;
}

Embedding Embedding::load_sharded(WeightLoader& loader, const std::string& name, int64_t vocab,
                                  int64_t hidden, const TensorParallel& tp) {
  if (!tp.enabled()) return load(loader, name, vocab, hidden);
  Embedding e;
  e.vocab_range = tp.padded_split(vocab);
  // Rows are read one at a time and never multiplied: the stored rows of this rank's range.
  e.table =
      loader.matrix_rows_as_stored(name, vocab, hidden, e.vocab_range.first, e.vocab_range.count);
  e.reduce = tp.reducer();
  return e;
}

void Embedding::forward(const ExecutionContext& ctx, const int32_t* ids, int64_t num_tokens,
                        float* out) const {
  if (reduce == nullptr) {
    ops::embedding_lookup(ctx.kernels(), table, ids, num_tokens, out);
    return;
  }
  const int64_t hidden = table.cols;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int64_t local = ids[t] - vocab_range.first;
    float* row = out + t * hidden;
    if (local >= 0 && local < vocab_range.count) {
      const auto id = static_cast<int32_t>(local);
      ops::embedding_lookup(ctx.kernels(), table, &id, 1, row);
    } else {
      std::fill(row, row + hidden, 0.0f);
    }
  }
  reduce->all_reduce_sum(out, static_cast<size_t>(num_tokens * hidden), DType::kF32);
}

}  // namespace pagoda
