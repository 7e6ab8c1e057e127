// Pre-tokenizers of HF tokenizer.json ("pre_tokenizer" key): Split, Digits, ByteLevel, Metaspace,
// Whitespace, WhitespaceSplit and Sequence. Each one cuts every piece into smaller pieces (and may
// rewrite them: ByteLevel maps bytes to GPT-2 characters, Metaspace spaces to '▁'); the model then
// tokenizes each piece on its own.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace pagoda {

struct PreToken {
  std::string text;
  // True when the piece starts at offset 0 of the original input (Metaspace prepend_scheme
  // "first").
  bool at_origin = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by their sub-pieces, in order; empty pieces are dropped.
  virtual void pre_tokenize(std::vector<PreToken>& pieces) const = 0;
};

// How a Split keeps the pattern's matches (HF SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Cuts `text` given its pattern matches (sorted, non-overlapping) the way HF
// NormalizedString::split does; appends non-empty [begin, end) pieces to `out`.
void split_with_behavior(size_t text_size, const std::vector<std::pair<size_t, size_t>>& matches,
                         SplitBehavior behavior, bool invert,
                         std::vector<std::pair<size_t, size_t>>& out);

// Builds the pre-tokenizer described by `spec`; returns nullptr for JSON null. Throws
// pagoda::Error naming `file` for an unknown type or a malformed entry.
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& spec, std::string_view file);

}  // namespace pagoda
