// Rewrites a generated DeepSeek model with an MTP layer so that the layer's drafts are what the
// model will produce (speculative method "mtp" accepting every draft): a forced acceptance rate
// of 1 for tests and benchmarks, which random weights (accepting nothing) cannot give.
#pragma once

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
void make_mtp_layer_predict_the_model(const std::string& dir);

}  // namespace pagoda
