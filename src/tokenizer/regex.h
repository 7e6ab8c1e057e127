// A compiled regular expression with Oniguruma-compatible semantics on top of PCRE2 + JIT.
// HF tokenizers compiles its Split/Replace patterns with Oniguruma (Ruby syntax); the
// differences that matter for tokenizer patterns are papered over here:
//  - `\s`/`\S` mean the Unicode White_Space property (PCRE2's UCP `\s` also accepts U+180E);
//  - `^`/`$` are line anchors (Ruby), so patterns compile in PCRE2 MULTILINE mode with LF newlines.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pagoda {

using ByteRange = std::pair<size_t, size_t>;  // [begin, end) byte offsets

class Regex {
 public:
  // Throws pagoda::Error naming the pattern and PCRE2's message when it does not compile.
  explicit Regex(std::string_view pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends every non-overlapping match in `text` (valid UTF-8), left to right, to `out`.
  // After an empty match the search resumes one character later, like Oniguruma's iterator.
  void find_all(std::string_view text, std::vector<ByteRange>& out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
};

// Rewrites Oniguruma-isms in `pattern` into PCRE2 syntax (see the file comment). Exposed for tests.
std::string translate_onig_pattern(std::string_view pattern);

}  // namespace pagoda
