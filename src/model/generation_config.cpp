// Parsing generation_config.json (transformers' GenerationConfig keys that sampling uses).
#include "model/generation_config.h"

#include <filesystem>

#include "model/model_config.h"
#include "util/error.h"

namespace pagoda {
namespace {

using nlohmann::json;

const json* find_value(const json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<double> number(const json& j, const char* key, const std::string& path) {
  const json* v = find_value(j, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) fail("{}: key '{}' must be a number, got {}", path, key, v->dump());
  return v->get<double>();
}

std::optional<int64_t> integer(const json& j, const char* key, const std::string& path) {
  const json* v = find_value(j, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number_integer())
    fail("{}: key '{}' must be an integer, got {}", path, key, v->dump());
  return v->get<int64_t>();
}

}  // namespace

GenerationConfig GenerationConfig::from_dir(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "generation_config.json").string();
  if (!std::filesystem::exists(path)) return {};
  return from_json(read_json_file(path), path);
}

GenerationConfig GenerationConfig::select(const std::string& choice,
                                          GenerationConfig model_config) {
  if (choice.empty() || choice == "auto") return model_config;
  if (choice == "vllm") {
    GenerationConfig ids_only;
    ids_only.bos_token_id = model_config.bos_token_id;
    ids_only.eos_token_ids = std::move(model_config.eos_token_ids);
    return ids_only;
  }
  const std::string path = (std::filesystem::path(choice) / "generation_config.json").string();
  if (!std::filesystem::is_regular_file(path)) {
    fail("--generation-config {}: {} not found (give auto, vllm or a directory holding one)",
         choice, path);
  }
  return from_json(read_json_file(path), path);
}

GenerationConfig GenerationConfig::from_json(const json& j, const std::string& path) {
  if (!j.is_object()) fail("{}: expected a JSON object, got {}", path, j.type_name());
  GenerationConfig g;
  g.temperature = number(j, "temperature", path);
  if (g.temperature && *g.temperature < 0) {
    fail("{}: key 'temperature' must be non-negative, got {}", path, *g.temperature);
  }
  g.top_p = number(j, "top_p", path);
  if (g.top_p && !(*g.top_p > 0 && *g.top_p <= 1)) {
    fail("{}: key 'top_p' must be in (0, 1], got {}", path, *g.top_p);
  }
  g.top_k = integer(j, "top_k", path);
  g.repetition_penalty = number(j, "repetition_penalty", path);
  if (g.repetition_penalty && !(*g.repetition_penalty > 0)) {
    fail("{}: key 'repetition_penalty' must be positive, got {}", path, *g.repetition_penalty);
  }
  g.max_new_tokens = integer(j, "max_new_tokens", path);
  if (g.max_new_tokens && *g.max_new_tokens <= 0) {
    fail("{}: key 'max_new_tokens' must be positive, got {}", path, *g.max_new_tokens);
  }
  if (const json* v = find_value(j, "do_sample")) {
    if (!v->is_boolean())
      fail("{}: key 'do_sample' must be true or false, got {}", path, v->dump());
    g.do_sample = v->get<bool>();
  }
  const std::vector<int64_t> bos = parse_token_id_list(j, "bos_token_id", path);
  if (!bos.empty()) g.bos_token_id = bos.front();
  g.eos_token_ids = parse_token_id_list(j, "eos_token_id", path);
  return g;
}

SamplingParams GenerationConfig::default_sampling_params() const {
  SamplingParams p;
  if (temperature) p.temperature = static_cast<float>(*temperature);
  if (top_p) p.top_p = static_cast<float>(*top_p);
  // transformers' top_k 0 and vLLM's -1 both mean "off"; SamplingParams takes 0 or -1.
  if (top_k) p.top_k = *top_k <= 0 ? 0 : static_cast<int>(*top_k);
  if (repetition_penalty) p.repetition_penalty = static_cast<float>(*repetition_penalty);
  if (max_new_tokens) p.max_tokens = static_cast<int>(*max_new_tokens);
  if (do_sample.has_value() && !*do_sample) p.temperature = 0.0f;
  return p;
}

}  // namespace pagoda
