// Single-sequence templates from tokenizers/src/processors/*.rs.
#include "tokenizer/post_processor.h"

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace pagoda {

namespace {

SpecialTokensTemplate parse_template(const nlohmann::json& spec, std::string_view file) {
  SpecialTokensTemplate result;
  bool seen_sequence = false;
  for (const auto& item : spec.at("single")) {
    if (item.contains("Sequence")) {
      if (item["Sequence"].at("id").get<std::string>() != "A") {
        fail("{}: post_processor TemplateProcessing: single template uses sequence B", file);
      }
      seen_sequence = true;
      continue;
    }
    if (!item.contains("SpecialToken")) {
      fail("{}: post_processor TemplateProcessing: bad template item {}", file, item.dump());
    }
    const auto name = item["SpecialToken"].at("id").get<std::string>();
    const auto& specials = spec.at("special_tokens");
    if (!specials.contains(name)) {
      fail("{}: post_processor TemplateProcessing: special token '{}' is not defined", file, name);
    }
    auto& target = seen_sequence ? result.suffix : result.prefix;
    for (const auto& id : specials[name].at("ids")) target.push_back(id.get<TokenId>());
  }
  return result;
}

}  // namespace

SpecialTokensTemplate parse_post_processor(const nlohmann::json& spec, std::string_view file) {
  if (spec.is_null()) return {};
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
    fail("{}: post_processor: expected an object with a \"type\"", file);
  }
  const std::string type = spec["type"].get<std::string>();
  try {
    if (type == "ByteLevel") return {};
    if (type == "TemplateProcessing") return parse_template(spec, file);
    if (type == "BertProcessing" || type == "RobertaProcessing") {
      // "cls": ["[CLS]", 101], "sep": ["[SEP]", 102]
      return {{spec.at("cls").at(1).get<TokenId>()}, {spec.at("sep").at(1).get<TokenId>()}};
    }
    if (type == "Sequence") {
      // Each processor wraps the output of the previous one.
      SpecialTokensTemplate result;
      for (const auto& child : spec.at("processors")) {
        SpecialTokensTemplate step = parse_post_processor(child, file);
        step.prefix.insert(step.prefix.end(), result.prefix.begin(), result.prefix.end());
        result.prefix = std::move(step.prefix);
        result.suffix.insert(result.suffix.end(), step.suffix.begin(), step.suffix.end());
      }
      return result;
    }
  } catch (const nlohmann::json::exception& e) {
    fail("{}: post_processor {}: {}", file, type, e.what());
  }
  fail("{}: post_processor type '{}' is not supported", file, type);
}

}  // namespace pagoda
