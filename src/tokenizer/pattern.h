// The {"String": ...} / {"Regex": ...} pattern of Split, Replace and their decoder twins.
// Both kinds find non-overlapping leftmost matches (HF compiles a String as an escaped regex).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/regex.h"

namespace pagoda {

class Pattern {
 public:
  static Pattern literal(std::string text);
  static Pattern regex(std::string_view pattern);
  // Throws pagoda::Error naming `file` when `spec` is neither form or the regex is bad.
  static Pattern from_json(const nlohmann::json& spec, std::string_view file);

  // Appends every match in `text` to `out`.
  void find_all(std::string_view text, std::vector<ByteRange>& out) const;
  // `text` with every match replaced by `content`.
  std::string replace_all(std::string_view text, std::string_view content) const;

 private:
  std::string literal_;
  std::shared_ptr<const Regex> regex_;  // null for a literal
};

}  // namespace pagoda
