// Turning a chat model's generated text into OpenAI tool calls, incrementally: a parser is fed
// the text deltas of one choice as they are generated and says, each time, which content and
// which pieces of tool calls can be sent now. A streamed response sends those pieces as
// `delta.tool_calls`; a whole response runs the same parser over the whole text (parse_all), so
// the two always agree. Each model family writes its calls its own way (vLLM's
// --tool-call-parser); grammar-constrained calls (tool_choice required or a named function) are
// plain JSON. Malformed output is never an error: whatever cannot be read as a call stays content.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::server {

// One piece of a streamed tool call. The first piece of call `index` has `first` set and the
// function's name; every piece may append to its arguments (a JSON text once complete).
struct ToolCallPiece {
  int index = 0;
  bool first = false;
  std::string name;
  std::string arguments;
};

struct ToolParseDelta {
  std::string content;
  std::vector<ToolCallPiece> calls;
  bool empty() const { return content.empty() && calls.empty(); }
};

struct ParsedToolCall {
  std::string name;
  std::string arguments;
};

// The whole of what a parser read: the content (text outside the calls) and the calls.
struct ParsedToolOutput {
  std::string content;
  std::vector<ParsedToolCall> calls;
  void add(const ToolParseDelta& delta);
};

class ToolCallParser {
 public:
  virtual ~ToolCallParser() = default;
  // Feeds the next piece of generated text; returns what can be sent now. Text that may still
  // turn out to be part of a call is held back.
  virtual ToolParseDelta feed(std::string_view text) = 0;
  // End of output: whatever is held back is settled (a call the model did not finish is sent as
  // far as it got if its name is known, otherwise its text is content).
  virtual ToolParseDelta finish() = 0;
};

// Feeds `text` whole and finishes.
ParsedToolOutput parse_all(ToolCallParser& parser, std::string_view text);

// The names --tool-call-parser accepts: deepseek_v3, deepseek_v31, hermes.
const std::vector<std::string>& tool_call_parser_names();
// A parser of the model format `name`; null when there is none of that name.
std::unique_ptr<ToolCallParser> make_tool_call_parser(std::string_view name);

// Length of the longest suffix of `text` that is a proper prefix of `marker`: the part of a
// streamed text that must wait, because the next delta may complete the marker.
size_t partial_marker_suffix(std::string_view text, std::string_view marker);

}  // namespace pagoda::server
