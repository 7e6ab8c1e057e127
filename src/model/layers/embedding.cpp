#include "model/layers/embedding.h"

#include "kernels/ops.h"
#include "model/weights.h"

namespace pagoda {

Embedding Embedding::load(WeightLoader& loader, const std::string& name, int64_t vocab,
                          int64_t hidden) {
  return Embedding{loader.matrix_as_stored(name, vocab, hidden)};
}

void Embedding::forward(const ExecutionContext& ctx, const int32_t* ids, int64_t num_tokens,
                        float* out) const {
  ops::embedding_lookup(ctx.kernels(), table, ids, num_tokens, out);
}

}  // namespace pagoda
