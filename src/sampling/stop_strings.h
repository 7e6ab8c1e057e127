// StopStringMatcher: finds the request's stop strings in the streamed output text and decides
// how much of it may be emitted now. The detokenizer feeds it each new piece of text.
//
// Semantics (chosen so the result never depends on how the text is cut into pieces):
//   - the match is the stop string that ends first in the text; among those ending at the same
//     byte, the longest (earliest start);
//   - without include_stop_str_in_output, output stops just before the match, and a suffix that
//     could still grow into a stop string is held back, so streamed text never contains one;
//   - with include_stop_str_in_output, output ends just after the match; nothing needs holding
//     back since the text up to the end of a match is emitted either way.
// vLLM scans the stop list in order instead of by position, which can emit one stop string while
// stopping at another; ending at the earliest match avoids that.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pagoda/sampling_params.h"

namespace pagoda {

class StopStringMatcher {
 public:
  struct PushResult {
    std::string text;  // safe to emit now
    bool stopped = false;
  };

  // Empty stop strings are ignored.
  StopStringMatcher(std::span<const std::string> stop, bool include_stop_str_in_output);
  explicit StopStringMatcher(const SamplingParams& params)
      : StopStringMatcher(params.stop, params.include_stop_str_in_output) {}

  // new_text is whole UTF-8 code points; the returned text never splits one. After a stop, every
  // push returns {"", true}.
  PushResult push(std::string_view new_text);

  // At the end of generation (no stop string matched): the text still held back.
  std::string flush();

  bool stopped() const { return stopped_; }
  // The stop string that matched (vLLM's stop_reason); empty until stopped.
  const std::string& stop_reason() const { return stop_reason_; }
  // Bytes received but not yet emitted.
  size_t num_held_bytes() const { return held_.size() - num_emitted_held_bytes_; }

 private:
  // Length of the longest suffix of held_ that is a proper prefix of some stop string.
  size_t partial_match_length() const;

  std::vector<std::string> stops_;
  bool include_stop_;
  size_t max_stop_bytes_ = 0;
  // The tail of the text that a stop string could still complete. Without include_stop_, none
  // of it was emitted; with it, all of it was (num_emitted_held_bytes_ == held_.size()).
  std::string held_;
  size_t num_emitted_held_bytes_ = 0;
  bool stopped_ = false;
  std::string stop_reason_;
};

}  // namespace pagoda
