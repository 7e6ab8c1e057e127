// The tiny models the model, DeepSeek and parallel tests generate (demo/model_generator.h): one
// place for their sizes and for DeepSeek's MLA and mixture-of-experts shape, so that each test
// sets only what it changes (its layers, KV heads, shared experts, positions, dtype, seed).
#pragma once

#include <string>

#include "model/model_spec.h"

namespace pagoda::test {

// `architecture` at hidden 128 in 4 heads of 32, an intermediate of 256 and a vocabulary of 509
// (which splits unevenly over ranks). The rest keeps ModelSpec's defaults.
ModelSpec tiny_spec(const std::string& architecture);

// Three layers of 4 MLA heads (a latent of 64 plus 16 rope dims; 32 nope and 32 value dims per
// head), a dense first layer then two MoE layers of 8 routed experts, 2 per token. V2 in the
// Lite shape (q_proj, softmax greedy routing, 2 shared experts of 64 rows), V3 with q_a / q_b
// (a query latent of 64) and sigmoid noaux_tc routing over 4 groups, 2 of them per token, and
// one shared expert of 128 rows. Reads spec.architecture; sets only the layers and `deepseek`.
void set_tiny_deepseek_shape(ModelSpec& spec);

// tiny_spec(architecture) (DeepseekV2ForCausalLM or DeepseekV3ForCausalLM) in the shape above.
ModelSpec tiny_deepseek_spec(const std::string& architecture);

// A published DeepSeek shape (a preset's `deepseek`) at test size that keeps what it chose:
// query compression or none, its routing, shared experts and MTP layers. A latent of 32 plus 8
// rope dims, 16 nope and 16 value dims per head (a query latent of 24 where there is one); with
// experts, 8 of 32 rows, 2 per token, at most one dense layer first, and at most 4 groups with 2
// of them per token (noaux_tc needs 2 experts per group).
void shrink_deepseek_shape(DeepseekSpec& d);

}  // namespace pagoda::test
