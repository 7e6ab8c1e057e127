// AWQ and GPTQ int4 checkpoints, as AutoAWQ / AutoGPTQ / GPTQModel write them and vLLM reads
// them, repacked at load into Pagoda's kI4 layout (util/dtype.h) under the plain HF name
// (`X.weight`), so models load them like any other weight.
//
// Both store a linear layer X [out, in] as three (or four) tensors:
//   X.qweight  int32, eight 4-bit values per word. GPTQ packs along `in`: [in / 8, out], value
//              j of a word at bits 4j. AWQ packs along `out`: [in, out / 8], in the order
//              0, 2, 4, 6, 1, 3, 5, 7 (nibble i holds output column 8k + order[i]).
//   X.qzeros   int32 [groups, out / 8], packed along `out` the same way as each format's
//              qweight packs `out` (GPTQ: plain order; AWQ: the interleaved order).
//   X.scales   fp16 [groups, out].
//   X.g_idx    int32 [in] (GPTQ only, optional): the group of each input column.
// and w[o, c] = scale[g, o] * (q[c, o] - zero[g, o]) with g = g_idx[c] (default c / group).
// GPTQ's original format ("gptq", checkpoint_format v1) stores zero - 1; "gptq_v2" does not.
//
// Repacking is exact (up to rounding scale * zero to fp16 for the kI4 `min`) when groups are
// runs of consecutive input columns. With activation order (desc_act: a g_idx that is not
// c / group) the groups are scattered; those layers are dequantized and requantized into
// contiguous groups, a small, documented loss.
#pragma once

#include <nlohmann/json.hpp>

namespace pagoda {

class TensorStore;

// If `quantization_config` (config.json's) names AWQ or GPTQ, adds a kI4 `X.weight` for every
// `X.qweight` in `store`. Throws pagoda::Error naming the tensor and the problem (bits other
// than 4, shapes that disagree, a group size that does not split the input). Returns the number
// of layers repacked (0 for any other checkpoint).
int repack_awq_gptq(TensorStore& store, const nlohmann::json& quantization_config);

}  // namespace pagoda
