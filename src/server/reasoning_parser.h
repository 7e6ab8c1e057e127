// Splits DeepSeek-R1 style output into reasoning and answer: the text inside <think>…</think>
// goes to `reasoning_content`, the rest to `content` (vLLM's deepseek_r1 reasoning parser).
// R1's chat template already ends the prompt with "<think>\n", so the model usually emits only
// the closing tag: everything before "</think>" is reasoning, and output that never closes the
// tag is all reasoning. Works incrementally on streamed text deltas, holding back a suffix that
// could be the start of a tag split across two deltas.
#pragma once

#include <string>
#include <string_view>

namespace pagoda::server {

struct ReasoningDelta {
  std::string reasoning;
  std::string content;
};

class ReasoningParser {
 public:
  // Feeds the next piece of generated text; returns what can be emitted now.
  ReasoningDelta feed(std::string_view text);
  // End of output: releases any held-back text.
  ReasoningDelta finish();

  // Whole-text convenience for non-streamed responses.
  static ReasoningDelta split(std::string_view text);

 private:
  void emit(std::string_view text, ReasoningDelta& out) const;

  std::string pending_;  // held back: may be the beginning of a tag
  bool in_reasoning_ = true;
  bool at_start_ = true;  // an opening <think> is only stripped at the very start
};

}  // namespace pagoda::server
