// From a Hugging Face `architectures` name to the factory that builds that family. This is
// the only place that knows which families exist; nothing else switches on architecture.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"

namespace pagoda {

using ModelFactory = std::function<std::unique_ptr<Model>(const ModelConfig&, const TensorStore&,
                                                          const ModelOptions&)>;

// Throws pagoda::Error naming the architecture and listing the supported ones.
std::unique_ptr<Model> create_model(const ModelConfig& config, const TensorStore& tensors,
                                    const ModelOptions& options);
std::vector<std::string> supported_architectures();

// Family factories, each defined in its own file.
std::unique_ptr<Model> create_llama_model(const ModelConfig&, const TensorStore&,
                                          const ModelOptions&);
std::unique_ptr<Model> create_deepseek_model(const ModelConfig&, const TensorStore&,
                                             const ModelOptions&);

}  // namespace pagoda
