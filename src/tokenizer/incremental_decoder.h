// Streaming detokenization: turns a growing list of token ids into text deltas that are always
// complete UTF-8 and never revise text already emitted. Like vLLM's detokenize_incrementally and
// HF's DecodeStream, it decodes a small window of previous tokens plus the new ones and emits only
// what the new tokens add; decoding a window (not single tokens) keeps context-dependent decoders
// right, e.g. SentencePiece's "▁word" keeps its space unless it starts the whole text.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace pagoda {

class IncrementalDecoder {
 public:
  // `prompt_ids` are context only: their text is never emitted. The tokenizer must outlive this.
  IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special_tokens,
                     std::span<const TokenId> prompt_ids = {});

  // Adds one generated token and returns the text that became final (often empty: a token that
  // ends inside a UTF-8 character is held back until the character completes).
  std::string step(TokenId id);

  // Returns whatever is still held back (e.g. a dangling partial character, shown as U+FFFD).
  // Call once when the sequence ends.
  std::string finish();

 private:
  // Number of prompt tokens kept as left context (vLLM's
  // INITIAL_INCREMENTAL_DETOKENIZATION_OFFSET).
  static constexpr size_t kContextTokens = 5;

  const Tokenizer& tokenizer_;
  bool skip_special_tokens_;
  std::vector<TokenId> ids_;  // window: ids_[0..read_offset_) already emitted or context
  size_t prefix_offset_ = 0;  // where the decoding window starts
  size_t read_offset_ = 0;    // first id whose text is not emitted yet
};

}  // namespace pagoda
