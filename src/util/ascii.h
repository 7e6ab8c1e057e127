// ASCII-only case folding and trimming, for protocol tokens (HTTP header values, flag values)
// where locale-dependent or Unicode-aware functions would be wrong.
#pragma once

#include <cctype>
#include <string>
#include <string_view>

namespace pagoda {

inline std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

inline std::string trim_ascii_space(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

}  // namespace pagoda
