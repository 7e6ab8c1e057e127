// What opening a GGUF file needs to know about one llama.cpp architecture: its config.json keys,
// the Hugging Face names of its tensors (its family table), and how stacked tensors split into the
// per-expert / per-head matrices Pagoda's model code loads. gguf_model.cpp does the rest for all of
// them. A new architecture is one file defining a GgufArchitecture plus one line in its table.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loader/gguf.h"
#include "model/tensor_names.h"

namespace pagoda {

// Rows [first_row, first_row + shape[0]) of a GGUF tensor seen as a [rows, cols] matrix (all
// outer dims folded into rows), stored under an HF name with `shape`.
struct GgufTensorPart {
  std::string hf_name;
  int64_t first_row = 0;
  std::vector<int64_t> shape;
};

struct GgufArchitecture {
  const char* gguf_name;  // general.architecture
  // Fills the architecture's own config.json keys (architectures, model_type, head sizes...);
  // `config` already holds the keys every architecture shares (see gguf_config_json).
  void (*add_config)(const GgufFile& file, nlohmann::json& config);
  // The family names (model/tensor_names.h), GGUF -> HF.
  const FamilyTensorNames& names;
  // Splits a per-layer tensor that HF stores as several (stacked experts, fused gate/up); empty
  // when the tensor maps one to one. `hf_prefix` is "model.layers.N.".
  std::vector<GgufTensorPart> (*split)(const GgufTensorInfo& info, const std::string& suffix,
                                       const std::string& hf_prefix) = nullptr;
  // llama.cpp permutes q/k rows for its interleaved rope (Llama only); undone at load.
  bool permuted_qk = false;
};

// deepseek2: DeepSeek-V2, V2-Lite, V2.5, V3, R1 (gguf_deepseek2.cpp).
const GgufArchitecture& gguf_deepseek2_architecture();

}  // namespace pagoda
