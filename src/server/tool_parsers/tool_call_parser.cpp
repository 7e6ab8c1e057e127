// The parser registry and the helpers every format shares; see tool_call_parser.h.
#include "server/tool_parsers/tool_call_parser.h"

#include <algorithm>

#include "server/tool_parsers/deepseek_tool_parser.h"
#include "server/tool_parsers/hermes_tool_parser.h"

namespace pagoda::server {

void ParsedToolOutput::add(const ToolParseDelta& delta) {
  content += delta.content;
  for (const ToolCallPiece& piece : delta.calls) {
    if (piece.first) calls.push_back({piece.name, std::string()});
    if (calls.empty()) continue;  // a parser never sends arguments before its call's first piece
    calls[std::min(static_cast<size_t>(piece.index), calls.size() - 1)].arguments +=
        piece.arguments;
  }
}

ParsedToolOutput parse_all(ToolCallParser& parser, std::string_view text) {
  ParsedToolOutput out;
  out.add(parser.feed(text));
  out.add(parser.finish());
  return out;
}

const std::vector<std::string>& tool_call_parser_names() {
  static const std::vector<std::string> kNames = {"deepseek_v3", "deepseek_v31", "hermes"};
  return kNames;
}

std::unique_ptr<ToolCallParser> make_tool_call_parser(std::string_view name) {
  if (name == "deepseek_v3") return std::make_unique<DeepSeekToolParser>(DeepSeekToolParser::v3());
  if (name == "deepseek_v31")
    return std::make_unique<DeepSeekToolParser>(DeepSeekToolParser::v31());
  if (name == "hermes") return std::make_unique<HermesToolParser>();
  return nullptr;
}

size_t partial_marker_suffix(std::string_view text, std::string_view marker) {
  if (marker.empty()) return 0;
  const size_t max_len = std::min(text.size(), marker.size() - 1);
  for (size_t len = max_len; len > 0; --len) {
    if (text.substr(text.size() - len) == marker.substr(0, len)) return len;
  }
  return 0;
}

}  // namespace pagoda::server
