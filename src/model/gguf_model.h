// Opening a llama.cpp GGUF model file as a Pagoda model: the config.json our families read is
// built from the `<arch>.*` metadata, tensors are renamed to the Hugging Face names and repacked
// (loader/gguf_repack.h; Llama's q/k rows un-permuted), and the tokenizer and chat template come
// from the tokenizer.* metadata. So `pagoda generate --model FILE.gguf` runs the same model code
// as the HF directory the GGUF was converted from.
//
// Architectures: llama (LlamaForCausalLM: Llama, DeepSeek-LLM, DeepSeek-Coder,
// R1-Distill-Llama), qwen2 (Qwen2ForCausalLM: R1-Distill-Qwen) and deepseek2
// (DeepseekV2ForCausalLM / DeepseekV3ForCausalLM: DeepSeek-V2, V2-Lite, V2.5, V3, R1; stacked
// expert tensors split per expert, see deepseek_family.cpp). Each is described by a
// GgufArchitecture in its family (model/model_family.h).
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "loader/gguf.h"
#include "loader/safetensors.h"
#include "model/generation_config.h"
#include "model/model_config.h"
#include "tokenizer/gguf_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

struct GgufModel {
  ModelConfig config;
  TensorStore tensors;  // HF names; keeps the file mapped
  Tokenizer tokenizer;
  std::string chat_template;    // tokenizer.chat_template ("" when absent)
  GenerationConfig generation;  // bos / eos ids (eos + eot) from the tokenizer metadata
};

// True for a path ending in ".gguf" (how the CLI tells a GGUF file from a model directory).
bool is_gguf_path(const std::string& path);

// Throws pagoda::Error with one line naming the file and the key / tensor that is wrong.
// `progress` (optional) follows the tensor bytes repacked: reading them through the map is what
// takes the time of a GGUF load.
GgufModel open_gguf_model(const std::string& path, FileMemory memory = FileMemory::kMap,
                          Progress* progress = nullptr);

// The pieces, for tests and tools:
// tokenizer.* metadata (views into `file`).
GgufVocab read_gguf_vocab(const GgufFile& file);
// The HF config.json equivalent of the file's metadata.
nlohmann::json gguf_config_json(const GgufFile& file);
// The HF name of a GGUF tensor of `architecture` ("blk.3.attn_q.weight" ->
// "model.layers.3.self_attn.q_proj.weight"), "" when Pagoda has no use for it. Stacked tensors
// (ffn_*_exps) have no single name: open_gguf_model splits them.
std::string hf_tensor_name(const std::string& gguf_name, const std::string& architecture = "llama");

}  // namespace pagoda
