// Literal and regex patterns (see pattern.h).
#include "tokenizer/pattern.h"

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace pagoda {

Pattern Pattern::literal(std::string text) {
  Pattern p;
  p.literal_ = std::move(text);
  return p;
}

Pattern Pattern::regex(std::string_view pattern) {
  Pattern p;
  p.regex_ = std::make_shared<const Regex>(pattern);
  return p;
}

Pattern Pattern::from_json(const nlohmann::json& spec, std::string_view file) {
  if (spec.is_object() && spec.contains("String") && spec["String"].is_string()) {
    return literal(spec["String"].get<std::string>());
  }
  if (spec.is_object() && spec.contains("Regex") && spec["Regex"].is_string()) {
    try {
      return regex(spec["Regex"].get<std::string>());
    } catch (const Error& e) {
      fail("{}: {}", file, e.what());
    }
  }
  fail("{}: pattern must be {{\"String\": ...}} or {{\"Regex\": ...}}, got {}", file, spec.dump());
}

void Pattern::find_all(std::string_view text, std::vector<ByteRange>& out) const {
  if (regex_) {
    regex_->find_all(text, out);
    return;
  }
  if (literal_.empty()) return;
  size_t pos = 0;
  while ((pos = text.find(literal_, pos)) != std::string_view::npos) {
    out.emplace_back(pos, pos + literal_.size());
    pos += literal_.size();
  }
}

std::string Pattern::replace_all(std::string_view text, std::string_view content) const {
  std::vector<ByteRange> matches;
  find_all(text, matches);
  if (matches.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size() + matches.size() * content.size());
  size_t prev = 0;
  for (const auto& [begin, end] : matches) {
    out.append(text.substr(prev, begin - prev));
    out.append(content);
    prev = end;
  }
  out.append(text.substr(prev));
  return out;
}

}  // namespace pagoda
