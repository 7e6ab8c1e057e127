// From a Hugging Face `architectures` name to the family that serves it (model/model_family.h).
// model_registry.cpp is the only place that lists the families; nothing else switches on
// architecture.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/model.h"

namespace pagoda {

// Throws pagoda::Error naming the architecture and listing the supported ones.
// The model's weights go to `ctx`'s device, prepared for its kernel table; forward() must run on
// a context of the same device.
std::unique_ptr<Model> create_model(const ExecutionContext& ctx, const ModelConfig& config,
                                    const TensorStore& tensors, const ModelOptions& options);
std::vector<std::string> supported_architectures();

}  // namespace pagoda
