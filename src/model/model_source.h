// What a `--model` argument names, opened: a Hugging Face directory (config.json,
// safetensors, tokenizer.json) or a llama.cpp GGUF file (everything from its metadata). The
// engine and the tools start here, so every command takes either.
#pragma once

#include <string>

#include "loader/safetensors.h"
#include "model/generation_config.h"
#include "model/model_config.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

struct ModelSource {
  std::string path;  // the directory or .gguf file
  ModelConfig config;
  GenerationConfig generation;
  TensorStore tensors;
  Tokenizer tokenizer;
  std::string chat_template;         // "" when the model has none
  std::string chat_template_origin;  // where it came from, for error messages
};

// `tokenizer_dir` overrides the model's tokenizer when not empty. Throws pagoda::Error naming the
// file and the problem.
// `memory`: how weight files get into memory (util/mapped_file.h); `progress` (optional) follows
// the bytes of safetensors files copied into memory, or of GGUF tensors repacked. `key` opens a
// directory that `pagoda encrypt` wrote (loader/safetensors.h); GGUF files are never encrypted.
// `fp8`: what FP8 matrices become (loader/fp8_checkpoint.h).
ModelSource open_model_source(const std::string& path, const std::string& tokenizer_dir = "",
                              FileMemory memory = FileMemory::kMap, Progress* progress = nullptr,
                              const crypto::ModelKey* key = nullptr,
                              Fp8Weights fp8 = Fp8Weights::kInt8);

}  // namespace pagoda
