// Parsers for grammar-forced tool calls; see forced_tool_parser.h.
#include "server/tool_parsers/forced_tool_parser.h"

#include <nlohmann/json.hpp>

namespace pagoda::server {

ToolParseDelta NamedToolParser::feed(std::string_view text) {
  ToolParseDelta out;
  if (text.empty()) return out;
  out.calls.push_back({0, !started_, started_ ? std::string() : name_, std::string(text)});
  started_ = true;
  return out;
}

ToolParseDelta NamedToolParser::finish() {
  ToolParseDelta out;
  // Even an empty output (max_tokens reached at once) answers the forced call.
  if (!started_) out.calls.push_back({0, true, name_, std::string()});
  started_ = true;
  return out;
}

ToolParseDelta RequiredToolsParser::feed(std::string_view text) {
  ToolParseDelta out;
  all_.append(text);
  for (char c : text) {
    if (depth_ >= 2) element_.push_back(c);
    if (in_string_) {
      if (escaped_) {
        escaped_ = false;
      } else if (c == '\\') {
        escaped_ = true;
      } else if (c == '"') {
        in_string_ = false;
      }
      continue;
    }
    if (c == '"') {
      in_string_ = true;
    } else if (c == '[' || c == '{') {
      if (++depth_ == 2) element_.assign(1, c);
    } else if (c == ']' || c == '}') {
      if (--depth_ != 1) continue;
      const nlohmann::ordered_json call = nlohmann::ordered_json::parse(element_, nullptr, false);
      element_.clear();
      if (!call.is_object() || !call.contains("name") || !call["name"].is_string()) continue;
      const auto params = call.find("parameters");
      out.calls.push_back(
          {num_calls_++, true, call["name"].get<std::string>(),
           params == call.end()
               ? std::string("{}")
               : params->dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace)});
    }
  }
  return out;
}

ToolParseDelta RequiredToolsParser::finish() {
  ToolParseDelta out;
  // Output that held no complete call (cut short, or not the array): it is all content.
  if (num_calls_ == 0) out.content = all_;
  all_.clear();
  return out;
}

}  // namespace pagoda::server
