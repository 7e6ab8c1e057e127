// FP8 checkpoints: e4m3 weights with fp32 scales, as DeepSeek-V3/R1 are published (one
// `X.weight_scale_inv` per 128 x 128 block, quantization_config {"quant_method": "fp8",
// "fmt": "e4m3", "weight_block_size": [128, 128]}) and as other publishers write them (one
// `X.weight_scale` per tensor or per output row). A weight is w[r, c] = e4m3(q[r, c]) *
// scale[r / block_rows, c / block_cols]; edge blocks may be partial, so the scale grid is
// [ceil(rows / block_rows), ceil(cols / block_cols)] (V3's 576-row kv_a_proj_with_mqa has a
// [5, 56] grid).
//
// The loader converts each FP8 matrix when the store opens, a row at a time, into what the
// kernels multiply by (--fp8-weights): exact fp32 ("dequant", the reference path) or Pagoda's
// int8 / int4 panels (dequantized exactly, then requantized). Only the converted matrices are
// ever resident besides the mapped file, so loading needs about the final weight bytes, never a
// full float copy of the model.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace pagoda {

class TensorStore;

enum class Fp8Weights {
  kDequant,   // fp32, exactly e4m3 * scale
  kInt8,      // int8, one scale per 128 columns (the FP8 block width) where the columns split
  kInt4,      // int4 in groups of 32
  kAsStored,  // left as e4m3 codes (get() refuses them; find() shows them): for converters
};

// "dequant" / "int8" / "int4"; throws pagoda::Error naming the flag otherwise.
Fp8Weights parse_fp8_weights(const std::string& name);
const char* fp8_weights_name(Fp8Weights mode);

// True when `model_dir`/config.json announces FP8 weights (quant_method "fp8").
bool is_fp8_checkpoint(const std::string& model_dir);

// Converts every F8_E4M3 matrix `X.weight` in `store` that has a scale (`X.weight_scale_inv`
// or `X.weight_scale`) as `mode` says, replacing it under its own name. `quantization_config`
// (config.json's, or null) gives the block size (default [128, 128]) and must say e4m3 if it
// names a format. Throws pagoda::Error naming the file and tensor (a missing scale, a scale grid
// of the wrong shape, a scale type other than F32/BF16) or the config key. Returns the number
// of matrices converted.
int convert_fp8_weights(TensorStore& store, const nlohmann::json& quantization_config,
                        Fp8Weights mode);

// The inverse, for `pagoda make-model --dtype fp8` and tests: quantizes fp32 w [rows, cols]
// into e4m3 codes with one scale per block (absmax / 448, as DeepSeek's quantizer), q [rows,
// cols] and scale_inv [ceil(rows / block_rows), ceil(cols / block_cols)].
void quantize_fp8_blocks(const float* w, int64_t rows, int64_t cols, int64_t block_rows,
                         int64_t block_cols, uint8_t* q, float* scale_inv);

}  // namespace pagoda
