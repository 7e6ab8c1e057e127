// Parsing and checking of --speculative-config.
#include "engine/speculative_config.h"

#include <array>
#include <optional>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace pagoda {
namespace {

using nlohmann::json;

// vLLM's methods that Pagoda does not run yet: named so the error says so, not "unknown".
constexpr std::array<std::string_view, 3> kUnsupportedMethods = {"eagle", "eagle3", "medusa"};

std::optional<int32_t> read_int(const json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer()) {
    fail("--speculative-config: \"{}\" must be an integer, got {}", key, it->dump());
  }
  const auto value = it->get<int64_t>();
  if (value < 1 || value > 1024) {
    fail("--speculative-config: \"{}\" must be between 1 and 1024, got {}", key, value);
  }
  return static_cast<int32_t>(value);
}

}  // namespace

SpeculativeConfig parse_speculative_config(std::string_view json_text) {
  SpeculativeConfig config;
  if (json_text.find_first_not_of(" \t\r\n") == std::string_view::npos) return config;
  json object;
  try {
    object = json::parse(json_text);
  } catch (const json::exception& e) {
    fail("--speculative-config: not valid JSON ({}): {}", e.what(), json_text);
  }
  if (!object.is_object()) fail("--speculative-config: expected a JSON object, got {}", json_text);

  for (const auto& [key, value] : object.items()) {
    if (key != "method" && key != "num_speculative_tokens" && key != "prompt_lookup_max" &&
        key != "prompt_lookup_min" && key != "model") {
      fail(
          "--speculative-config: unknown key \"{}\" (known: method, num_speculative_tokens, "
          "prompt_lookup_max, prompt_lookup_min, model)",
          key);
    }
  }
  // vLLM infers the method from "model" when it is left out; a model path means a draft model.
  auto method = object.find("method");
  auto model = object.find("model");
  if (method == object.end() && model != object.end()) {
    config.method = "draft_model";
  } else if (method == object.end() || !method->is_string()) {
    fail("--speculative-config: \"method\" must be a string such as \"ngram\"");
  } else {
    config.method = method->get<std::string>();
  }
  // vLLM's older name for DeepSeek's MTP layers.
  if (config.method == "deepseek_mtp") config.method = "mtp";
  for (std::string_view unsupported : kUnsupportedMethods) {
    if (config.method == unsupported) {
      fail(
          "--speculative-config: method \"{}\" is not supported yet (supported: ngram, mtp, "
          "draft_model)",
          config.method);
    }
  }
  if (config.method != "ngram" && config.method != "mtp" && config.method != "draft_model") {
    fail("--speculative-config: unknown method \"{}\" (supported: ngram, mtp, draft_model)",
         config.method);
  }
  if (config.method == "draft_model") {
    if (model == object.end() || !model->is_string() || model->get<std::string>().empty()) {
      fail("--speculative-config: \"model\" (the draft model's path) is required for draft_model");
    }
    config.model = model->get<std::string>();
  } else if (model != object.end()) {
    fail("--speculative-config: \"model\" applies to method \"draft_model\", not \"{}\"",
         config.method);
  }
  if (config.method != "ngram") {
    for (const char* key : {"prompt_lookup_max", "prompt_lookup_min"}) {
      if (object.contains(key)) {
        fail("--speculative-config: \"{}\" applies to method \"ngram\", not \"{}\"", key,
             config.method);
      }
    }
  }
  if (config.method == "mtp") {
    // vLLM's default for mtp: one draft per MTP layer, and V3 has one.
    config.num_speculative_tokens = read_int(object, "num_speculative_tokens").value_or(1);
    return config;
  }

  const std::optional<int32_t> k = read_int(object, "num_speculative_tokens");
  if (!k) {
    fail("--speculative-config: \"num_speculative_tokens\" is required for {}", config.method);
  }
  config.num_speculative_tokens = *k;
  if (config.method == "draft_model") return config;
  std::optional<int32_t> lookup_max = read_int(object, "prompt_lookup_max");
  std::optional<int32_t> lookup_min = read_int(object, "prompt_lookup_min");
  if (!lookup_max && !lookup_min) lookup_max = lookup_min = 5;  // vLLM's default
  if (!lookup_max) lookup_max = lookup_min;
  if (!lookup_min) lookup_min = lookup_max;
  if (*lookup_min > *lookup_max) {
    fail("--speculative-config: \"prompt_lookup_min\" {} exceeds \"prompt_lookup_max\" {}",
         *lookup_min, *lookup_max);
  }
  config.prompt_lookup_max = *lookup_max;
  config.prompt_lookup_min = *lookup_min;
  return config;
}

}  // namespace pagoda
