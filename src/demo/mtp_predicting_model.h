// Rewrites a generated DeepSeek model with an MTP layer so that the layer's drafts are what the
// model will produce (speculative method "mtp" accepting every draft): a forced acceptance rate
// of 1 for tests and benchmarks, which random weights (accepting nothing) cannot give.
#pragma once

#include <cstdint>
#include <string>

namespace pagoda {

// In place, on `dir`'s single model.safetensors (F32 or BF16; the generator's layout):
//  - every attention output and MLP down projection (decoder and MTP layers) becomes zero, so
//    the residual stream stays embed(token) and the model's next token depends on the current
//    token alone;
//  - the MTP layer's eh_proj becomes [I 0] (its normalised embedding passes, h is ignored),
//    enorm all ones, and its embed_tokens, shared_head.norm and shared_head.head copies of the
//    model's embedding, final norm and lm_head: its logits from token i + 1 are the model's at
//    i + 1, up to applying RMSNorm twice (a rescaling by ~1 + eps).
// The cost of a forward pass is unchanged (same shapes, dense zeros). Throws pagoda::Error
// naming the file and tensor when the layout is not that.
//
// `acceptance` < 1 forces a lower acceptance rate: the rows of shared_head.head for a random
// set S of round((1 - acceptance) * vocab) token ids (none, or at least two) are rotated
// within S, so the layer drafts another token of S exactly when the model's next token is in
// S, and the model's own token otherwise. The greedy next token of a random model is close to
// uniform over the vocabulary, and independent from one position to the next, so each draft
// is accepted with probability ~`acceptance`, whatever its position. Running it again on the
// same directory (another rate or seed) rewrites only what differs: the model is unchanged.
void make_mtp_layer_predict_the_model(const std::string& dir, double acceptance = 1.0,
                                      uint64_t seed = 0);

}  // namespace pagoda
