// Reading the output of a request whose tool_choice forces a call (vLLM does the same): the
// grammar made the model write JSON, not its own call format.
//  - a named function: the output is that function's arguments object; it streams as written.
//  - "required": the output is an array [{"name": ..., "parameters": {...}}, ...]; each call is
//    sent once its element is complete (its parameters re-serialized compactly, key order kept).
#pragma once

#include <string>
#include <string_view>

#include "server/tool_parsers/tool_call_parser.h"

namespace pagoda::server {

class NamedToolParser : public ToolCallParser {
 public:
  explicit NamedToolParser(std::string name) : name_(std::move(name)) {}
  ToolParseDelta feed(std::string_view text) override;
  ToolParseDelta finish() override;

 private:
  std::string name_;
  bool started_ = false;
};

class RequiredToolsParser : public ToolCallParser {
 public:
  ToolParseDelta feed(std::string_view text) override;
  ToolParseDelta finish() override;

 private:
  std::string all_;      // everything fed, for output that is not the array after all
  std::string element_;  // the array element being read
  int depth_ = 0;        // of brackets and braces, outside strings
  bool in_string_ = false;
  bool escaped_ = false;
  int num_calls_ = 0;
};

}  // namespace pagoda::server
