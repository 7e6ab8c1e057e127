// Pagoda's own quantized checkpoints, as `pagoda quantize` writes them: each quantized matrix
// NAME as I8 (int8) or U8 (packed int4) beside NAME_scale (and NAME_min) in F16, which
// TensorStore folds back into one kI8 / kI4 tensor (loader/safetensors.h), and config.json's
// quantization_config {"quant_method": "pagoda", "weight_type": "int8" | "int4", ...}. This
// reads what the config announces, before any weight file is opened: how the files should get
// into memory depends on it (engine/weights_memory.h).
#pragma once

#include <optional>
#include <string>

#include "util/dtype.h"

namespace pagoda {

// kI8 or kI4 when `model_dir`/config.json says `pagoda quantize` stored its matrices so;
// nullopt for anything else (no config.json, another quant_method or none, a weight_type this
// build does not know, a GGUF or single-file path). Never throws: the loader reports a broken
// config.json when it opens the model.
std::optional<DType> pagoda_checkpoint_weight_type(const std::string& model_dir);

}  // namespace pagoda
