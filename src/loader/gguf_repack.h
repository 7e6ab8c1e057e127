// GGUF tensor -> Pagoda tensor. Float tensors stay where they are in the memory map; ggml's
// block-quantized types are brought into Pagoda's two quantized layouts (util/dtype.h), exactly
// where the layouts allow it:
//   F32, F16, BF16   in place (copied only when rows must be reordered)
//   Q8_0  -> kI8 g32 exact (the int8 values and the fp16 d)
//   Q5_0  -> kI8 g32 exact (q - 16 fits int8; scale d)
//   Q4_0  -> kI4 g32 exact (scale d, min -8d: multiplying by 8 is exact in fp16)
//   Q4_1  -> kI4 g32 exact (scale d, min m)
//   Q4_K  -> kI4 g32, scale = fp16(d * sc), min = fp16(-dmin * m) per 32-value sub-block; the
//            products need up to 17 significant bits, fp16 keeps 11, so each rounds with
//            relative error <= 2^-11 (round to nearest)
//   Q6_K, Q5_K -> kI8 g32 requantized: each 32 values are dequantized exactly as ggml does and
//            quantized again symmetrically (scale = fp16(absmax / 127), q = round(v / scale)),
//            so the error is at most half a step, ~absmax / 254 per value
// Anything else is an error naming the tensor and its type.
//
// llama.cpp's converter permutes the rows of Llama's attn_q / attn_k so that ggml's
// interleaved ("NORM") rope works on them; `unpermute_heads` undoes that, so the weights have
// Hugging Face semantics (rotate-half rope) again. Rows are independent in every layout, so it
// is a row shuffle applied while repacking.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "loader/gguf.h"
#include "loader/safetensors.h"

namespace pagoda {

struct RepackedTensor {
  Tensor tensor;                           // HF shape (GGUF dims reversed), Pagoda dtype
  std::shared_ptr<const void> keep_alive;  // the GgufFile, or the buffer the bytes live in
};

// Repacks `info` (a tensor of `file`) under the name `name`. With unpermute_heads > 0 the rows
// are treated as [unpermute_heads, head_dim] and llama.cpp's q/k permutation is undone.
// Threads over rows (OpenMP). Throws pagoda::Error "FILE: tensor NAME has type T, which ..."
// for types it does not repack.
RepackedTensor repack_gguf_tensor(const std::shared_ptr<const GgufFile>& file,
                                  const GgufTensorInfo& info, const std::string& name,
                                  int64_t unpermute_heads = 0);

// The GGUF row holding HF row `row` of a q/k weight that llama.cpp permuted for `num_heads`
// heads of `head_dim` rows: HF row (h, half i, j) sits at GGUF row (h, j, i).
int64_t llama_permuted_row(int64_t row, int64_t head_dim);

}  // namespace pagoda
