// The DeepSeek tool-call state machine; see deepseek_tool_parser.h.
#include "server/tool_parsers/deepseek_tool_parser.h"

namespace pagoda::server {
namespace {

constexpr std::string_view kCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kCallsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kSep = "<｜tool▁sep｜>";

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

// `text` is a proper prefix of `marker` (more text may complete it).
bool may_become(std::string_view text, std::string_view marker) {
  return text.size() < marker.size() && starts_with(marker, text);
}

}  // namespace

DeepSeekToolParser::Format DeepSeekToolParser::v3() {
  return {kSep, "\n```json\n", "\n```<｜tool▁call▁end｜>"};
}

DeepSeekToolParser::Format DeepSeekToolParser::v31() {
  return {{}, kSep, "<｜tool▁call▁end｜>"};
}

void DeepSeekToolParser::consume(size_t num_bytes) {
  if (num_calls_ == 0 && state_ != State::kContent) raw_.append(pending_, 0, num_bytes);
  pending_.erase(0, num_bytes);
}

void DeepSeekToolParser::give_up(ToolParseDelta& out) {
  if (num_calls_ == 0) {
    out.content += raw_;
    raw_.clear();
    state_ = State::kContent;
  } else {
    state_ = State::kAfterCalls;
  }
}

bool DeepSeekToolParser::step(ToolParseDelta& out) {
  switch (state_) {
    case State::kContent: {
      const size_t begin = pending_.find(kCallsBegin);
      if (begin == std::string::npos) {
        const size_t hold = partial_marker_suffix(pending_, kCallsBegin);
        out.content.append(pending_, 0, pending_.size() - hold);
        pending_.erase(0, pending_.size() - hold);
        return false;
      }
      out.content.append(pending_, 0, begin);
      pending_.erase(0, begin);
      state_ = State::kBetweenCalls;
      consume(kCallsBegin.size());
      return true;
    }
    case State::kBetweenCalls: {
      const size_t start = pending_.find_first_not_of(" \t\r\n");
      if (start == std::string::npos) return false;
      const std::string_view rest = std::string_view(pending_).substr(start);
      if (starts_with(rest, kCallBegin)) {
        consume(start + kCallBegin.size());
        state_ = format_.type_end.empty() ? State::kName : State::kType;
        return true;
      }
      if (starts_with(rest, kCallsEnd)) {
        consume(start + kCallsEnd.size());
        state_ = State::kAfterCalls;
        return true;
      }
      if (may_become(rest, kCallBegin) || may_become(rest, kCallsEnd)) return false;
      give_up(out);
      return true;
    }
    case State::kType: {
      const size_t end = pending_.find(format_.type_end);
      if (end == std::string::npos) return false;
      consume(end + format_.type_end.size());
      state_ = State::kName;
      return true;
    }
    case State::kName: {
      const size_t end = pending_.find(format_.name_end);
      if (end == std::string::npos) return false;
      if (end == 0) {
        give_up(out);
        return true;
      }
      ToolCallPiece piece;
      piece.index = num_calls_++;
      piece.first = true;
      piece.name = pending_.substr(0, end);
      out.calls.push_back(std::move(piece));
      raw_.clear();
      pending_.erase(0, end + format_.name_end.size());
      state_ = State::kArguments;
      return true;
    }
    case State::kArguments: {
      const size_t end = pending_.find(format_.arguments_end);
      const size_t take =
          end != std::string::npos
              ? end
              : pending_.size() - partial_marker_suffix(pending_, format_.arguments_end);
      if (take > 0) {
        ToolCallPiece piece;
        piece.index = num_calls_ - 1;
        piece.arguments = pending_.substr(0, take);
        out.calls.push_back(std::move(piece));
      }
      if (end == std::string::npos) {
        pending_.erase(0, take);
        return false;
      }
      pending_.erase(0, end + format_.arguments_end.size());
      state_ = State::kBetweenCalls;
      return true;
    }
    case State::kAfterCalls:
      out.content += pending_;
      pending_.clear();
      return false;
  }
  return false;
}

ToolParseDelta DeepSeekToolParser::feed(std::string_view text) {
  ToolParseDelta out;
  pending_.append(text);
  while (step(out)) {
  }
  return out;
}

ToolParseDelta DeepSeekToolParser::finish() {
  ToolParseDelta out;
  switch (state_) {
    case State::kContent:
    case State::kAfterCalls:
      out.content += pending_;
      break;
    case State::kArguments:
      // The model stopped inside a call (max_tokens): the call as far as it got.
      if (!pending_.empty()) out.calls.push_back({num_calls_ - 1, false, {}, pending_});
      break;
    case State::kBetweenCalls:
    case State::kType:
    case State::kName:
      // An unfinished marker or call header: no call. Before any call it was all content.
      if (num_calls_ == 0) out.content += raw_ + pending_;
      break;
  }
  pending_.clear();
  raw_.clear();
  state_ = State::kAfterCalls;
  return out;
}

}  // namespace pagoda::server
