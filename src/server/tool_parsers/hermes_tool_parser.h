// The hermes tool-call format (vLLM's `hermes` parser), used by Qwen 2.5 and so by
// DeepSeek-R1-Distill-Qwen: each call is a JSON object {"name": ..., "arguments": {...}} between
// <tool_call> and </tool_call>, after any text. A call is sent once its closing tag arrives (its
// arguments re-serialized compactly, in the model's key order); a body that is not such an
// object stays content, tags included.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "server/tool_parsers/tool_call_parser.h"

namespace pagoda::server {

class HermesToolParser : public ToolCallParser {
 public:
  ToolParseDelta feed(std::string_view text) override;
  ToolParseDelta finish() override;

 private:
  bool step(ToolParseDelta& out);
  // The call in a tag's body, or nullopt when the body is not one.
  std::optional<ParsedToolCall> read_call(std::string_view body) const;
  void emit_call(std::string_view body, bool closed, ToolParseDelta& out);

  std::string pending_;
  bool in_call_ = false;
  // Right after a call: whitespace before the next <tool_call> (or the end) is dropped.
  bool after_call_ = false;
  int num_calls_ = 0;
};

}  // namespace pagoda::server
