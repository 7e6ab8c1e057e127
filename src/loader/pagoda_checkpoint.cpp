#include "loader/pagoda_checkpoint.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

namespace pagoda {
namespace {

// `object`[key] when it is a string, else "" (value() would throw on another type).
std::string string_member(const nlohmann::json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

std::optional<DType> pagoda_checkpoint_weight_type(const std::string& model_dir) {
  std::ifstream in(std::filesystem::path(model_dir) / "config.json");
  if (!in) return std::nullopt;
  const nlohmann::json config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object() || !config.contains("quantization_config")) return std::nullopt;
  const nlohmann::json& qc = config["quantization_config"];
  if (!qc.is_object() || string_member(qc, "quant_method") != "pagoda") return std::nullopt;
  const std::string type = string_member(qc, "weight_type");
  if (type == "int8") return DType::kI8;
  if (type == "int4") return DType::kI4;
  return std::nullopt;
}

}  // namespace pagoda
