// The hermes tool-call scanner; see hermes_tool_parser.h.
#include "server/tool_parsers/hermes_tool_parser.h"

#include <nlohmann/json.hpp>

namespace pagoda::server {
namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";
constexpr std::string_view kSpace = " \t\r\n";

}  // namespace

std::optional<ParsedToolCall> HermesToolParser::read_call(std::string_view body) const {
  // ordered_json keeps the arguments in the order the model wrote them.
  const nlohmann::ordered_json call = nlohmann::ordered_json::parse(body, nullptr, false);
  if (!call.is_object()) return std::nullopt;
  auto name = call.find("name");
  if (name == call.end() || !name->is_string() || name->get<std::string>().empty())
    return std::nullopt;
  ParsedToolCall out{name->get<std::string>(), "{}"};
  auto args = call.find("arguments");
  if (args == call.end()) args = call.find("parameters");  // some fine-tunes write this key
  if (args != call.end() && !args->is_null()) {
    // A model that writes the arguments as a JSON string already gives OpenAI's form.
    out.arguments =
        args->is_string()
            ? args->get<std::string>()
            : args->dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  }
  return out;
}

void HermesToolParser::emit_call(std::string_view body, bool closed, ToolParseDelta& out) {
  if (std::optional<ParsedToolCall> call = read_call(body)) {
    out.calls.push_back({num_calls_++, true, std::move(call->name), std::move(call->arguments)});
    after_call_ = true;
    return;
  }
  out.content.append(kOpen);
  out.content.append(body);
  if (closed) out.content.append(kClose);
}

bool HermesToolParser::step(ToolParseDelta& out) {
  if (in_call_) {
    const size_t end = pending_.find(kClose);
    if (end == std::string::npos) return false;
    in_call_ = false;
    emit_call(std::string_view(pending_).substr(0, end), true, out);
    pending_.erase(0, end + kClose.size());
    return true;
  }
  if (after_call_) {
    const size_t start = pending_.find_first_not_of(kSpace);
    if (start == std::string::npos) return false;
    const std::string_view rest = std::string_view(pending_).substr(start);
    if (rest.size() < kOpen.size() && kOpen.substr(0, rest.size()) == rest) return false;
    if (rest.substr(0, kOpen.size()) == kOpen) pending_.erase(0, start);
    after_call_ = false;
  }
  const size_t open = pending_.find(kOpen);
  if (open == std::string::npos) {
    const size_t hold = partial_marker_suffix(pending_, kOpen);
    out.content.append(pending_, 0, pending_.size() - hold);
    pending_.erase(0, pending_.size() - hold);
    return false;
  }
  out.content.append(pending_, 0, open);
  pending_.erase(0, open + kOpen.size());
  in_call_ = true;
  return true;
}

ToolParseDelta HermesToolParser::feed(std::string_view text) {
  ToolParseDelta out;
  pending_.append(text);
  while (step(out)) {
  }
  return out;
}

ToolParseDelta HermesToolParser::finish() {
  ToolParseDelta out;
  if (in_call_) {
    // Stopped before </tool_call> (max_tokens, or a model that ends on EOS): a complete object
    // still counts, as in vLLM.
    emit_call(pending_, false, out);
  } else if (!(after_call_ && pending_.find_first_not_of(kSpace) == std::string::npos)) {
    out.content += pending_;
  }
  pending_.clear();
  in_call_ = false;
  after_call_ = false;
  return out;
}

}  // namespace pagoda::server
