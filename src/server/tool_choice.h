// A chat request's `tool_choice` and what it asks of generation (vLLM's serving_chat rules):
//  - none: the model answers in text (the tools are still shown to the chat template);
//  - auto: the model may call; its own call format is read by the --tool-call-parser;
//  - required / a named function: generation is constrained by a JSON schema, so the output is
//    always a well-formed call whose arguments validate against the function's `parameters`.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "server/tool_parsers/tool_call_parser.h"

namespace pagoda::server {

struct ToolChoice {
  enum class Kind { kNone, kAuto, kRequired, kNamed };
  Kind kind = Kind::kNone;
  std::string name;  // kNamed: the function

  bool forced() const { return kind == Kind::kRequired || kind == Kind::kNamed; }
};

// The JSON schema (as text) a forced choice constrains the output to. `tools` is the request's
// validated list [{type: "function", function: {name, parameters?, ...}}]. Named: the function's
// parameters. Required: an array of one or more (exactly one unless `parallel_tool_calls`) of
// {"name": <a tool's name>, "parameters": <its parameters>}, the tools' "$defs" gathered at the
// top so that their "#/$defs/..." references still resolve. Throws RequestError (400, param
// "tools") when two tools define the same $defs name differently.
std::string forced_tool_schema(const nlohmann::json& tools, const ToolChoice& choice,
                               bool parallel_tool_calls);

// The parser that reads a choice's output: the JSON parsers for forced choices, the model
// format `parser_name` for auto; null for none (or auto without a parser).
std::unique_ptr<ToolCallParser> make_choice_parser(const ToolChoice& choice,
                                                   const std::string& parser_name);

}  // namespace pagoda::server
