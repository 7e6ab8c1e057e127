// The families Pagoda serves, one line each, and the lookups every other room goes through.
#include "model/model_registry.h"

#include <fmt/ranges.h>

#include "model/model_config.h"
#include "model/model_family.h"
#include "util/error.h"

namespace pagoda {

std::span<const ModelFamily* const> model_families() {
  static const ModelFamily* const kFamilies[] = {
      &llama_family(),     // Llama, Qwen2: DeepSeek-LLM, DeepSeek-Coder, R1-Distill-Llama/Qwen
      &deepseek_family(),  // DeepSeek-V2, V2-Lite, V2.5, V3, R1: MLA + MoE
  };
  return kFamilies;
}

std::vector<std::string> supported_architectures() {
  std::vector<std::string> names;
  for (const ModelFamily* family : model_families()) {
    for (const FamilyArchitecture& a : family->architectures) names.push_back(a.hf_name);
  }
  return names;
}

const FamilyArchitecture* find_family_architecture(const std::string& hf_architecture) {
  for (const ModelFamily* family : model_families()) {
    for (const FamilyArchitecture& a : family->architectures) {
      if (hf_architecture == a.hf_name) return &a;
    }
  }
  return nullptr;
}

const ModelFamily* find_model_family(const std::string& hf_architecture) {
  for (const ModelFamily* family : model_families()) {
    for (const FamilyArchitecture& a : family->architectures) {
      if (hf_architecture == a.hf_name) return family;
    }
  }
  return nullptr;
}

const ModelFamily& model_family_of(const ModelConfig& config) {
  if (const ModelFamily* family = find_model_family(config.architecture)) return *family;
  fail("{}: unsupported architecture '{}' (supported: {})", config.config_path, config.architecture,
       fmt::join(supported_architectures(), ", "));
}

const GgufArchitecture& gguf_architecture_of(const ModelConfig& config) {
  for (const FamilyArchitecture& a : model_family_of(config).architectures) {
    if (config.architecture == a.hf_name) return *a.gguf;
  }
  fail("{}: architecture '{}' has no GGUF form", config.config_path, config.architecture);
}

GgufFamily gguf_family_named(const std::string& gguf_name, const std::string& path) {
  std::vector<std::string> supported;
  for (const ModelFamily* family : model_families()) {
    for (const FamilyArchitecture& a : family->architectures) {
      if (gguf_name == a.gguf->gguf_name) return {family, a.gguf};
      if (supported.empty() || supported.back() != a.gguf->gguf_name)
        supported.push_back(a.gguf->gguf_name);
    }
  }
  fail("{}: general.architecture '{}' is not supported for GGUF files (supported: {})", path,
       gguf_name, fmt::join(supported, ", "));
}

std::unique_ptr<Model> create_model(const ExecutionContext& ctx, const ModelConfig& config,
                                    const TensorStore& tensors, const ModelOptions& options) {
  return model_family_of(config).create(ctx, config, tensors, options);
}

}  // namespace pagoda
