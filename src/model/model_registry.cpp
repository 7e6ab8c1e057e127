#include "model/model_registry.h"

#include <map>

#include "model/model_config.h"
#include "util/error.h"

namespace pagoda {
namespace {

const std::map<std::string, ModelFactory>& registry() {
  static const std::map<std::string, ModelFactory> families = {
      {"LlamaForCausalLM", create_llama_model},  // DeepSeek-LLM, DeepSeek-Coder, R1-Distill-Llama
      {"Qwen2ForCausalLM", create_llama_model},  // R1-Distill-Qwen: Llama plus q/k/v biases
      {"DeepseekV2ForCausalLM", create_deepseek_model},  // V2, V2-Lite, V2.5: MLA + MoE
      {"DeepseekV3ForCausalLM", create_deepseek_model},  // V3, R1: MLA + MoE (sigmoid, noaux_tc)
  };
  return families;
}

}  // namespace

std::vector<std::string> supported_architectures() {
  std::vector<std::string> names;
  for (const auto& [name, factory] : registry()) names.push_back(name);
  return names;
}

std::unique_ptr<Model> create_model(const ModelConfig& config, const TensorStore& tensors,
                                    const ModelOptions& options) {
  const auto it = registry().find(config.architecture);
  if (it == registry().end()) {
    std::string supported;
    for (const std::string& name : supported_architectures()) {
      supported += supported.empty() ? name : ", " + name;
    }
    fail("{}: unsupported architecture '{}' (supported: {})", config.config_path,
         config.architecture, supported);
  }
  return it->second(config, tensors, options);
}

}  // namespace pagoda
