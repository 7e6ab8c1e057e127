// Incremental <think>…</think> splitting; see reasoning_parser.h.
#include "server/reasoning_parser.h"

#include <algorithm>

namespace pagoda::server {
namespace {

constexpr std::string_view kStartTag = "<think>";
constexpr std::string_view kEndTag = "</think>";

// Length of the longest suffix of `text` that is a proper prefix of `tag`.
size_t partial_tag_suffix(std::string_view text, std::string_view tag) {
  const size_t max_len = std::min(text.size(), tag.size() - 1);
  for (size_t len = max_len; len > 0; --len) {
    if (text.substr(text.size() - len) == tag.substr(0, len)) return len;
  }
  return 0;
}

}  // namespace

void ReasoningParser::emit(std::string_view text, ReasoningDelta& out) const {
  (in_reasoning_ ? out.reasoning : out.content).append(text);
}

ReasoningDelta ReasoningParser::feed(std::string_view text) {
  ReasoningDelta out;
  pending_.append(text);
  if (at_start_) {
    // Skip leading whitespace-free "<think>" if the model writes it itself.
    if (pending_.size() < kStartTag.size() && kStartTag.substr(0, pending_.size()) == pending_)
      return out;
    if (pending_.compare(0, kStartTag.size(), kStartTag) == 0) pending_.erase(0, kStartTag.size());
    at_start_ = false;
  }
  if (!in_reasoning_) {
    emit(pending_, out);
    pending_.clear();
    return out;
  }
  const size_t end = pending_.find(kEndTag);
  if (end != std::string::npos) {
    emit(std::string_view(pending_).substr(0, end), out);
    in_reasoning_ = false;
    emit(std::string_view(pending_).substr(end + kEndTag.size()), out);
    pending_.clear();
    return out;
  }
  const size_t hold = partial_tag_suffix(pending_, kEndTag);
  emit(std::string_view(pending_).substr(0, pending_.size() - hold), out);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

ReasoningDelta ReasoningParser::finish() {
  ReasoningDelta out;
  emit(pending_, out);
  pending_.clear();
  at_start_ = false;
  return out;
}

ReasoningDelta ReasoningParser::split(std::string_view text) {
  ReasoningParser parser;
  ReasoningDelta out = parser.feed(text);
  ReasoningDelta rest = parser.finish();
  out.reasoning += rest.reasoning;
  out.content += rest.content;
  return out;
}

}  // namespace pagoda::server
