// Writes complete Hugging Face model directories with random weights (config.json,
// generation_config.json, *.safetensors with an index when sharded, tokenizer.json,
// tokenizer_config.json) at any shape: for tests, benchmarks and the built-in `demo` model.
// The names and shapes it writes are the model family's table (model/model_family.h), which
// the loader and GGUF export read too; so are config.json's keys and the published presets.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loader/safetensors_writer.h"
#include "model/model_spec.h"

namespace pagoda {

// The architectures the generator writes.
std::vector<std::string> generator_architectures();

// tiny and demo (small Llamas), then each family's presets (the published config.json shapes:
// ds-coder-1.3b, ds-llm-7b, r1-distill-qwen-1.5b, deepseek-v2, deepseek-v2-lite, deepseek-v3;
// and tiny-deepseek-v3, V3's structure with an MTP layer at test size); throws pagoda::Error
// otherwise.
ModelSpec model_preset(const std::string& name);
std::vector<std::string> model_preset_names();

// Every weight tensor with its HF name and shape, in file order: the family's tensor_layout
// for the config.json that `spec` writes.
std::vector<TensorLayout> model_tensor_layout(const ModelSpec& spec);

struct GeneratedModel {
  std::string dir;
  int64_t num_parameters = 0;
  int64_t weight_bytes = 0;
  int64_t vocab_size = 0;            // in config.json (may exceed the spec's for --tokenizer-from)
  int64_t tokenizer_vocab_size = 0;  // ids the tokenizer uses
  std::vector<std::string> weight_files;
};

// Writes the directory `out_dir` (created if needed; existing model files are replaced).
// Deterministic for a given spec and seed, whatever the thread count. Throws pagoda::Error.
GeneratedModel generate_model(const ModelSpec& spec, const std::string& out_dir);

// The built-in demo model's directory: `cache_root`/pagoda/demo, generated on first use into
// a temporary directory and renamed into place, so concurrent first runs are safe. An empty
// `cache_root` means $XDG_CACHE_HOME, else $HOME/.cache.
std::string ensure_demo_model(const std::string& cache_root = "");

}  // namespace pagoda
