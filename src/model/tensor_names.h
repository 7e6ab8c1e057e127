// A model family's tensors, named once: each Hugging Face name (what checkpoints, the model files
// and the generator use) beside llama.cpp's GGUF name for it (gguf-py/gguf/constants.py). GGUF
// import (gguf_model.cpp) and `pagoda export-gguf` both read these tables,
// so the two directions cannot disagree. Each family's table lives in its *_family.cpp.
#pragma once

#include <span>
#include <string>

namespace pagoda {

struct TensorName {
  const char* gguf;  // suffix after "blk.N." (per layer) or the whole name (global)
  const char* hf;    // suffix after "model.layers.N." (per layer) or the whole name (global)
};

struct FamilyTensorNames {
  std::span<const TensorName> layer;   // per decoder layer
  std::span<const TensorName> global;  // embedding, final norm, lm_head
};

// The global tensors every causal LM here has: embed_tokens, the final norm, lm_head.
std::span<const TensorName> causal_lm_global_tensor_names();

// LlamaForCausalLM and Qwen2ForCausalLM (GGUF "llama", "qwen2"); llama_family.cpp.
const FamilyTensorNames& dense_tensor_names();
// DeepseekV2/V3ForCausalLM (GGUF "deepseek2"); deepseek_family.cpp. The experts' stacked
// tensors and the per-head split of kv_b_proj are not one-to-one and are named where they are
// stacked or split.
const FamilyTensorNames& deepseek2_tensor_names();

// The GGUF name of the HF tensor `hf_name` in `family` ("blk.N.<suffix>" for a layer's), or ""
// when the table has none.
std::string gguf_tensor_name(const FamilyTensorNames& family, const std::string& hf_name);

}  // namespace pagoda
