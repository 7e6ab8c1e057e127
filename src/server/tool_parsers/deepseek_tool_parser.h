// DeepSeek's tool-call format (vLLM's deepseek_v3 and deepseek_v31 parsers). The model writes
// its calls after any text, each between special tokens:
//   V3/R1:
//   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>…<｜tool▁calls▁end｜>
//   V3.1:
//   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>…<｜tool▁calls▁end｜>
// The markers are special tokens, so the request must keep them in the text
// (skip_special_tokens false). Arguments stream as the model writes them, raw, holding back only
// what may be the start of the closing marker.
#pragma once

#include <string>
#include <string_view>

#include "server/tool_parsers/tool_call_parser.h"

namespace pagoda::server {

class DeepSeekToolParser : public ToolCallParser {
 public:
  // Where each part of a call ends; type_end empty: the call has no type before its name.
  struct Format {
    std::string_view type_end;
    std::string_view name_end;
    std::string_view arguments_end;
  };
  static Format v3();
  static Format v31();

  explicit DeepSeekToolParser(Format format) : format_(format) {}

  ToolParseDelta feed(std::string_view text) override;
  ToolParseDelta finish() override;

 private:
  enum class State { kContent, kBetweenCalls, kType, kName, kArguments, kAfterCalls };

  // One step of the state machine over pending_; false when it must wait for more text.
  bool step(ToolParseDelta& out);
  // Text after the calls began that is no call: content again (all of it, markers included, if
  // no call was read yet; what follows, otherwise).
  void give_up(ToolParseDelta& out);
  void consume(size_t num_bytes);

  Format format_;
  State state_ = State::kContent;
  std::string pending_;
  std::string raw_;  // text consumed since <｜tool▁calls▁begin｜> while no call has been read
  int num_calls_ = 0;
};

}  // namespace pagoda::server
