// TokenWalker: runs many tokens through the PDA from one closed stack set, sharing the work of
// common prefixes. The tokens come sorted by bytes (as in Vocabulary::sorted_ids), so each keeps
// the stack sets of its predecessor's longest common prefix and only steps its own suffix; a
// prefix that kills every run settles all tokens that share it at once (xgrammar walks its token
// trie the same way).
//
// Verdicts: kAccept when some run consumes every byte of the token, kReject when none does and
// no run ever popped into kUnknownStack, kUnknown otherwise (the stack below decides).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "grammar/pda_runner.h"
#include "grammar/vocabulary.h"

namespace pagoda::grammar {

enum class TokenVerdict : uint8_t { kReject, kAccept, kUnknown };

class TokenWalker {
 public:
  TokenWalker(const Pda& pda, StackPool& pool) : runner_(pda, pool) {}

  template <typename OnToken>
  void walk(const StackSet& start, std::span<const int32_t> sorted_ids, const Vocabulary& vocab,
            OnToken&& on_token) {
    if (levels_.empty()) levels_.resize(1);
    levels_[0] = start;
    alive_.assign(1, 1);
    unknown_upto_.assign(1, start.reached_unknown ? 1 : 0);
    size_t num_valid = 1;  // levels_[0 .. num_valid) hold the previous token's prefixes
    std::string_view previous;
    for (const int32_t id : sorted_ids) {
      const std::string_view token = vocab.bytes(id);
      size_t lcp = 0;
      const size_t limit = std::min(previous.size(), token.size());
      while (lcp < limit && previous[lcp] == token[lcp]) ++lcp;
      size_t d = std::min(num_valid - 1, lcp);
      num_valid = d + 1;
      while (alive_[d] && d < token.size()) {
        if (levels_.size() < d + 2) levels_.resize(d + 2);
        if (alive_.size() < d + 2) {
          alive_.resize(d + 2);
          unknown_upto_.resize(d + 2);
        }
        alive_[d + 1] = runner_.advance(levels_[d], static_cast<uint8_t>(token[d]), levels_[d + 1]);
        unknown_upto_[d + 1] = unknown_upto_[d] || levels_[d + 1].reached_unknown;
        ++d;
        num_valid = d + 1;
      }
      TokenVerdict verdict = TokenVerdict::kAccept;
      if (!alive_[d])
        verdict = unknown_upto_[d - 1] ? TokenVerdict::kUnknown : TokenVerdict::kReject;
      on_token(id, verdict);
      previous = token;
    }
  }

 private:
  PdaRunner runner_;
  std::vector<StackSet> levels_;
  std::vector<char> alive_;
  std::vector<char> unknown_upto_;
};

}  // namespace pagoda::grammar
