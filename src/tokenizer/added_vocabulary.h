// Added tokens of HF tokenizer.json ("added_tokens"): matched in the text before normalization
// and the model, leftmost-longest, never split. Tokens with `normalized: false` are matched on the
// raw input, the others on each normalized segment; `lstrip`/`rstrip` swallow neighbouring
// whitespace and `single_word` rejects matches inside a word. Mirrors
// tokenizers/src/tokenizer/added_vocabulary.rs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/bpe_model.h"

namespace pagoda {

class Normalizer;

struct AddedToken {
  std::string content;
  TokenId id = 0;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = true;
};

// A span of text, or (id >= 0) an added token matched over that span.
struct TextSegment {
  size_t begin = 0, end = 0;
  TokenId id = -1;
};

class AddedVocabulary {
 public:
  // `normalizer` (may be null) turns the content of normalized tokens into their match pattern.
  AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer);

  // Cuts `text` at the matches of the raw-text (normalized=false) or normalized-text tokens.
  // Appends the segments, in order, to `out`; empty text spans are not appended.
  void split(std::string_view text, bool normalized_tokens, std::vector<TextSegment>& out) const;

  const AddedToken* find_by_id(TokenId id) const;
  std::optional<TokenId> find_by_content(std::string_view content) const;
  // True when `content` is the text of an added token marked special.
  bool is_special_content(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }
  bool empty() const { return tokens_.empty(); }

 private:
  // A byte trie over the patterns; node 0 is the root.
  struct Trie {
    struct Node {
      std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
      int32_t token = -1;                                 // index into tokens_
    };
    std::vector<Node> nodes{Node{}};
    bool first_byte[256] = {};
    void insert(std::string_view pattern, int32_t token);
    // Longest pattern starting at `pos`: (length, token index), or token index -1.
    std::pair<size_t, int32_t> longest_at(std::string_view text, size_t pos) const;
  };

  std::vector<AddedToken> tokens_;
  std::unordered_map<TokenId, size_t> index_by_id_;
  std::unordered_map<std::string, size_t, StringHash, std::equal_to<>> index_by_content_;
  Trie raw_trie_, normalized_trie_;
};

}  // namespace pagoda
