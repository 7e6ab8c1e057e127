#include "model/tensor_names.h"

#include <cstring>

namespace pagoda {

std::span<const TensorName> causal_lm_global_tensor_names() {
  static constexpr TensorName kGlobal[] = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"output_norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"},
  };
  return kGlobal;
}

std::string gguf_tensor_name(const FamilyTensorNames& family, const std::string& hf_name) {
  for (const TensorName& t : family.global) {
    if (hf_name == t.hf) return t.gguf;
  }
  // "model.layers.<N>.<suffix>"
  constexpr const char* kPrefix = "model.layers.";
  const size_t prefix_len = std::strlen(kPrefix);
  if (hf_name.rfind(kPrefix, 0) != 0) return "";
  const size_t dot = hf_name.find('.', prefix_len);
  if (dot == std::string::npos || dot == prefix_len) return "";
  const std::string layer = hf_name.substr(prefix_len, dot - prefix_len);
  if (layer.find_first_not_of("0123456789") != std::string::npos) return "";
  const std::string suffix = hf_name.substr(dot + 1);
  for (const TensorName& t : family.layer) {
    if (suffix == t.hf) return "blk." + layer + "." + t.gguf;
  }
  return "";
}

}  // namespace pagoda
