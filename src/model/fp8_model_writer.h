// Rewriting a float model directory as a block-scaled FP8 checkpoint in DeepSeek-V3's layout
// (loader/fp8_checkpoint.h): every projection matrix (`*_proj.weight`, experts included) becomes
// F8_E4M3 with an F32 `*_proj.weight_scale_inv` grid, config.json gets the quantization_config
// DeepSeek publishes, and embeddings, norms, routers and lm_head stay as they were, as in V3.
// `pagoda make-model --dtype fp8` and the FP8 tests make their checkpoints this way.
#pragma once

#include <cstdint>
#include <string>

namespace pagoda {

struct Fp8WriteResult {
  int64_t num_matrices = 0;  // converted to FP8
  int64_t weight_bytes = 0;  // of all weight files after the rewrite
};

// Rewrites `model_dir` in place (each weight file replaced by a new one, the index extended
// with the scale tensors). Throws pagoda::Error naming the file (not float weights, a write
// failure).
Fp8WriteResult write_fp8_model(const std::string& model_dir, int64_t block_rows = 128,
                               int64_t block_cols = 128);

}  // namespace pagoda
