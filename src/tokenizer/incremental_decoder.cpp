// Window-based incremental detokenization (see incremental_decoder.h).
#include "tokenizer/incremental_decoder.h"

#include <algorithm>

namespace pagoda {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

bool ends_with_replacement(const std::string& s) {
  return s.size() >= kReplacement.size() &&
         s.compare(s.size() - kReplacement.size(), kReplacement.size(), kReplacement) == 0;
}

// Length of the longest common prefix of `a` and `b`, cut back to a character boundary.
size_t common_prefix(const std::string& a, const std::string& b) {
  size_t n = 0;
  const size_t limit = std::min(a.size(), b.size());
  while (n < limit && a[n] == b[n]) ++n;
  while (n > 0 && n < b.size() && (static_cast<unsigned char>(b[n]) & 0xC0) == 0x80) --n;
  return n;
}

}  // namespace

IncrementalDecoder::IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special_tokens,
                                       std::span<const TokenId> prompt_ids)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {
  const size_t context = std::min(prompt_ids.size(), kContextTokens);
  ids_.assign(prompt_ids.end() - context, prompt_ids.end());
  prefix_offset_ = 0;
  read_offset_ = ids_.size();
}

std::string IncrementalDecoder::step(TokenId id) {
  ids_.push_back(id);
  const std::span<const TokenId> window(ids_.data() + prefix_offset_, ids_.size() - prefix_offset_);
  const std::string prefix_text =
      tokenizer_.decode(window.first(read_offset_ - prefix_offset_), skip_special_tokens_);
  const std::string new_text = tokenizer_.decode(window, skip_special_tokens_);
  // Wait while the text ends in an incomplete character (decoded as U+FFFD) or adds nothing.
  if (new_text.size() <= prefix_text.size() || ends_with_replacement(new_text)) return {};
  // The window's text normally extends the prefix's text; if a decoder rewrote it, emit only past
  // the common part so that emitted text is never revised.
  const size_t keep = new_text.compare(0, prefix_text.size(), prefix_text) == 0
                          ? prefix_text.size()
                          : common_prefix(prefix_text, new_text);
  std::string delta = new_text.substr(keep);
  // Slide the window: drop ids before the new prefix so each step costs O(window).
  const size_t new_prefix = read_offset_;
  ids_.erase(ids_.begin(), ids_.begin() + new_prefix);
  prefix_offset_ = 0;
  read_offset_ = ids_.size();
  return delta;
}

std::string IncrementalDecoder::finish() {
  if (read_offset_ == ids_.size()) return {};
  const std::span<const TokenId> window(ids_.data() + prefix_offset_, ids_.size() - prefix_offset_);
  const std::string prefix_text =
      tokenizer_.decode(window.first(read_offset_ - prefix_offset_), skip_special_tokens_);
  const std::string new_text = tokenizer_.decode(window, skip_special_tokens_);
  read_offset_ = ids_.size();
  if (new_text.size() <= prefix_text.size()) return {};
  const size_t keep = new_text.compare(0, prefix_text.size(), prefix_text) == 0
                          ? prefix_text.size()
                          : common_prefix(prefix_text, new_text);
  return new_text.substr(keep);
}

}  // namespace pagoda
