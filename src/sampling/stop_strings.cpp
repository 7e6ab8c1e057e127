// Stop string matching over streamed text; see stop_strings.h for the semantics.
#include "sampling/stop_strings.h"

#include <algorithm>

namespace pagoda {
namespace {

bool is_utf8_continuation(char byte) {
  return (static_cast<unsigned char>(byte) & 0xC0) == 0x80;
}

}  // namespace

StopStringMatcher::StopStringMatcher(std::span<const std::string> stop,
                                     bool include_stop_str_in_output)
    : include_stop_(include_stop_str_in_output) {
  for (const std::string& s : stop) {
    if (s.empty()) continue;
    stops_.push_back(s);
    max_stop_bytes_ = std::max(max_stop_bytes_, s.size());
  }
}

size_t StopStringMatcher::partial_match_length() const {
  const std::string_view held(held_);
  const size_t longest = std::min(held.size(), max_stop_bytes_ - 1);
  for (size_t length = longest; length > 0; --length) {
    const std::string_view suffix = held.substr(held.size() - length);
    for (const std::string& s : stops_) {
      if (s.size() > length && std::string_view(s).starts_with(suffix)) return length;
    }
  }
  return 0;
}

StopStringMatcher::PushResult StopStringMatcher::push(std::string_view new_text) {
  PushResult result;
  if (stopped_) {
    result.stopped = true;
    return result;
  }
  if (stops_.empty()) {
    result.text.assign(new_text);
    return result;
  }
  // held_ never contains a whole stop string, so any match found now involves new_text.
  held_.append(new_text);

  size_t best_start = std::string::npos;
  size_t best_end = std::string::npos;
  const std::string* best = nullptr;
  for (const std::string& s : stops_) {
    const size_t start = held_.find(s);
    if (start == std::string::npos) continue;
    const size_t end = start + s.size();
    if (best == nullptr || end < best_end || (end == best_end && start < best_start)) {
      best_start = start;
      best_end = end;
      best = &s;
    }
  }
  if (best != nullptr) {
    const size_t cut = include_stop_ ? best_end : best_start;
    // A match always reaches into new_text, past everything already emitted.
    result.text = held_.substr(num_emitted_held_bytes_, cut - num_emitted_held_bytes_);
    result.stopped = true;
    stopped_ = true;
    stop_reason_ = *best;
    held_.clear();
    num_emitted_held_bytes_ = 0;
    return result;
  }

  size_t num_keep = partial_match_length();
  // A kept suffix matches the start of a stop string, so it begins on a code point; widening it
  // over continuation bytes only guards against stop strings that are not valid UTF-8.
  while (num_keep < held_.size() && is_utf8_continuation(held_[held_.size() - num_keep])) {
    ++num_keep;
  }
  const size_t emit_end = include_stop_ ? held_.size() : held_.size() - num_keep;
  result.text = held_.substr(num_emitted_held_bytes_, emit_end - num_emitted_held_bytes_);
  held_.erase(0, held_.size() - num_keep);
  num_emitted_held_bytes_ = include_stop_ ? held_.size() : 0;
  return result;
}

std::string StopStringMatcher::flush() {
  std::string rest = held_.substr(num_emitted_held_bytes_);
  held_.clear();
  num_emitted_held_bytes_ = 0;
  return rest;
}

}  // namespace pagoda
