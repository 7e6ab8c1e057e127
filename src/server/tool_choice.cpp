// Schemas and parsers for tool_choice; see tool_choice.h.
#include "server/tool_choice.h"

#include <fmt/format.h>

#include "server/openai_protocol.h"
#include "server/tool_parsers/forced_tool_parser.h"

namespace pagoda::server {
namespace {

// A function without `parameters` takes any object (OpenAI: "omitting parameters defines a
// function with an empty parameter list"; clients still send {}).
json parameters_of(const json& tool) {
  const json& function = tool.at("function");
  auto it = function.find("parameters");
  return it == function.end() || it->is_null() ? json{{"type", "object"}} : *it;
}

}  // namespace

std::string forced_tool_schema(const json& tools, const ToolChoice& choice,
                               bool parallel_tool_calls) {
  if (choice.kind == ToolChoice::Kind::kNamed) {
    for (const json& tool : tools) {
      if (tool.at("function").at("name") == choice.name) return dump_json(parameters_of(tool));
    }
    throw_invalid(fmt::format("tool_choice names '{}', which is not in 'tools'", choice.name),
                  "tool_choice.function.name");
  }
  json defs = json::object();
  json alternatives = json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    json parameters = parameters_of(tools[i]);
    if (parameters.is_object() && parameters.contains("$defs")) {
      for (auto& [key, value] : parameters["$defs"].items()) {
        if (defs.contains(key) && defs[key] != value) {
          throw_invalid(fmt::format("'tools[{}].function.parameters.$defs.{}' differs from the "
                                    "definition of the same name in another tool",
                                    i, key),
                        "tools");
        }
        defs[key] = value;
      }
      parameters.erase("$defs");
    }
    alternatives.push_back(
        {{"type", "object"},
         {"properties",
          {{"name", {{"const", tools[i].at("function").at("name")}}}, {"parameters", parameters}}},
         {"required", {"name", "parameters"}},
         {"additionalProperties", false}});
  }
  json schema = {{"type", "array"},
                 {"minItems", 1},
                 {"items", alternatives.size() == 1 ? alternatives[0]
                                                    : json{{"anyOf", std::move(alternatives)}}}};
  if (!parallel_tool_calls) schema["maxItems"] = 1;
  if (!defs.empty()) schema["$defs"] = std::move(defs);
  return dump_json(schema);
}

std::unique_ptr<ToolCallParser> make_choice_parser(const ToolChoice& choice,
                                                   const std::string& parser_name) {
  switch (choice.kind) {
    case ToolChoice::Kind::kNone:
      return nullptr;
    case ToolChoice::Kind::kAuto:
      return make_tool_call_parser(parser_name);
    case ToolChoice::Kind::kRequired:
      return std::make_unique<RequiredToolsParser>();
    case ToolChoice::Kind::kNamed:
      return std::make_unique<NamedToolParser>(choice.name);
  }
  return nullptr;
}

}  // namespace pagoda::server
