// One model family, described once: everything about it that is not its forward graph. Which
// Hugging Face architectures it serves and the GGUF architecture each is written as, its tensor
// names (HF <-> GGUF, model/tensor_names.h), the tensors and shapes a checkpoint of a given
// config holds, and its GGUF metadata in both directions. GGUF import (gguf_model.cpp),
// `pagoda export-gguf`, the model generator (src/demo) and the model factory all read these
// tables, so there is no second table to disagree with them; `pagoda info` prints the shape
// lines it gives, and the generator takes config.json and its presets from it. A family's
// descriptor lives in its *_family.cpp; model_registry.cpp lists the families, one line each.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "loader/gguf.h"
#include "loader/safetensors_writer.h"
#include "model/model.h"
#include "model/tensor_names.h"

namespace pagoda {

class GgufWriter;

// Rows [first_row, first_row + shape[0]) of a GGUF tensor seen as a [rows, cols] matrix (all
// outer dims folded into rows), stored under an HF name with `shape`.
struct GgufTensorPart {
  std::string hf_name;
  int64_t first_row = 0;
  std::vector<int64_t> shape;
};

// One tensor that export writes other than by renaming one HF tensor (stacked experts, a matrix
// split in two): its GGUF name, its shape in HF order, and row r (every dim but the last folded)
// as fp32.
struct GgufExportTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::function<void(int64_t row, float* dst)> row;
};

// A family's part of an export: the tensors it builds itself, and every HF tensor those cover or
// that it leaves out on purpose (multi-token-prediction layers). Export renames the rest one to
// one through the family's tensor names.
struct GgufExportPlan {
  std::vector<GgufExportTensor> tensors;
  std::unordered_set<std::string> handled;
};

// One llama.cpp architecture (general.architecture) and how its metadata maps to config.json.
// Keys and conventions are those llama.cpp's converter writes and its loader reads.
struct GgufArchitecture {
  const char* gguf_name;
  // Import: fills the architecture's own config.json keys (architectures, model_type, head
  // sizes...); `config` already holds the keys every architecture shares (gguf_config_json).
  void (*add_config)(const GgufFile& file, nlohmann::json& config);
  // Export, the inverse: writes the architecture's metadata for `config`, the shared keys
  // included (add_common_gguf_hparams).
  void (*add_hparams)(GgufWriter& writer, const ModelConfig& config);
  // Import: splits a per-layer tensor that HF stores as several (stacked experts, fused
  // gate/up); empty when the tensor maps one to one. `hf_prefix` is "model.layers.N.".
  std::vector<GgufTensorPart> (*split)(const GgufTensorInfo& info, const std::string& suffix,
                                       const std::string& hf_prefix) = nullptr;
  // llama.cpp permutes q/k rows for its interleaved rope (Llama only): export permutes, import
  // undoes it.
  bool permuted_qk = false;
  // Export, the inverse of `split`: the tensors this architecture stores differently from HF.
  // Null when every tensor is a rename. The plan's rows read `store`, which must outlive it.
  GgufExportPlan (*plan_export)(const TensorStore& store, const ModelConfig& config) = nullptr;
};

// Builds the model with its weights in `ctx`'s device memory, prepared for its kernel table.
using ModelFactory = std::unique_ptr<Model> (*)(const ExecutionContext& ctx, const ModelConfig&,
                                                const TensorStore&, const ModelOptions&);

// What config parsing (model_config.cpp) takes from the architecture: the defaults and fixed
// choices of its transformers config and attention classes.
struct ArchitectureConfigRules {
  int64_t default_max_position_embeddings = 2048;  // LlamaConfig, DeepseekV2Config
  // Qwen2Attention: biases on q/k/v always, never on o_proj or the MLP, whatever config.json says.
  bool qkv_bias_only = false;
  // DeepSeek's MoE gate: V3's multiplies by routed_scaling_factor after normalising the top-k
  // weights, V2's only when it does not normalise (deepseek_config.h, MoeRouterConfig).
  bool moe_scale_after_norm = true;
};

struct ModelSpec;  // model/model_spec.h

struct FamilyArchitecture {
  const char* hf_name;  // config.json's architectures[0]
  const GgufArchitecture* gguf;
  ArchitectureConfigRules config = {};
  // The model generator's config.json for `spec` with `vocab_size` embedding rows, key for key
  // as the architecture's transformers config saves it; the generator adds the token ids.
  nlohmann::json (*generator_config)(const ModelSpec& spec, int64_t vocab_size) = nullptr;
};

// A published shape the model generator offers as `make-model --preset NAME`.
struct ModelPreset {
  const char* name;
  ModelSpec (*spec)();
};

// What the model generator takes from a family besides each architecture's config.json.
struct FamilyGenerator {
  // Completes `spec` (e.g. MLA's one K/V head per query head) and checks what only this
  // family constrains, naming make-model's flags or config.json's keys, before anything is
  // written; `config_path` is where config.json will go.
  void (*check)(ModelSpec& spec, const std::string& config_path);
  std::span<const ModelPreset> presets;
};

struct ModelFamily {
  const char* name;  // for messages
  std::span<const FamilyArchitecture> architectures;
  ModelFactory create;
  const FamilyTensorNames& tensor_names;
  // Every weight tensor a checkpoint of `config` holds, with its HF name and shape, in file
  // order; `dtype` is the weights' safetensors type (tensors a family keeps in F32 say so).
  std::vector<TensorLayout> (*tensor_layout)(const ModelConfig& config, const std::string& dtype);
  // `pagoda info`'s lines for the family's own shape (attention, feed-forward, experts), each
  // ending in a newline; the common lines (layers, vocabulary, memory) are info's.
  std::string (*describe)(const ModelConfig& config);
  FamilyGenerator generator;
};

// The families (model_registry.cpp) and lookups over them. The lookups that throw name the
// file and list what is supported.
std::span<const ModelFamily* const> model_families();
const ModelFamily* find_model_family(const std::string& hf_architecture);
const FamilyArchitecture* find_family_architecture(const std::string& hf_architecture);
const ModelFamily& model_family_of(const ModelConfig& config);
// The GGUF form `config` exports as.
const GgufArchitecture& gguf_architecture_of(const ModelConfig& config);
// The family and GGUF form of a file's general.architecture `gguf_name`.
struct GgufFamily {
  const ModelFamily* family;
  const GgufArchitecture* gguf;
};
GgufFamily gguf_family_named(const std::string& gguf_name, const std::string& path);

// The metadata every architecture shares (sizes, norm epsilon, rope base and scaling), written
// under `arch`; gguf_model.cpp, beside the import of the same keys.
void add_common_gguf_hparams(GgufWriter& writer, const ModelConfig& config,
                             const std::string& arch);

// The families, each described in its own file, and the graphs they build.
const ModelFamily& llama_family();     // llama_family.cpp
const ModelFamily& deepseek_family();  // deepseek_family.cpp
std::unique_ptr<Model> create_llama_model(const ExecutionContext&, const ModelConfig&,
                                          const TensorStore&,
                                          const ModelOptions&);  // llama_model.cpp
std::unique_ptr<Model> create_deepseek_model(const ExecutionContext&, const ModelConfig&,
                                             const TensorStore&,
                                             const ModelOptions&);  // deepseek_v2_model.cpp

}  // namespace pagoda
