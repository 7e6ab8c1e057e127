// CompiledGrammar: a Pda bound to a vocabulary, with the adaptive token-mask cache: for every
// PDA state that can consume a byte, the vocabulary classified once into tokens accepted and
// rejected whatever the stack below holds, and the few "uncertain" ones whose fate depends on it
// (they pop out of the state's rule mid-token). The matcher then only runs the uncertain tokens
// at each step. A state's entry stores whichever of its accepted or rejected lists is shorter
// (the idea of xgrammar's adaptive token mask cache); states no token can tell apart share one
// entry (state_classes.h). Entries are built the first time a state is
// reached, or all at once by precompute(); both are thread-safe, so one CompiledGrammar serves
// every request that uses the same grammar.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "grammar/pda.h"
#include "grammar/vocabulary.h"

namespace pagoda::grammar {

struct StateTokens {
  bool lists_rejected = false;     // `ids` are the rejected tokens, all other certain ones pass
  std::vector<int32_t> ids;        // accepted (or rejected) tokens, certain whatever the stack
  std::vector<int32_t> uncertain;  // sorted by bytes, as TokenWalker wants them
};

class CompiledGrammar {
 public:
  CompiledGrammar(Pda pda, std::shared_ptr<const Vocabulary> vocabulary);

  const Pda& pda() const { return pda_; }
  const Vocabulary& vocabulary() const { return *vocabulary_; }

  const StateTokens& state_tokens(int32_t state) const;
  void precompute() const;
  // States share an entry when no token can tell them apart (state_classes.h).
  int num_state_classes() const { return static_cast<int>(representative_.size()); }
  // Entries built so far and their total size in ids (for reports; not while other threads may
  // be building entries).
  size_t num_cached_states() const;
  size_t cached_ids() const;

 private:
  StateTokens classify(int32_t state) const;

  Pda pda_;
  std::shared_ptr<const Vocabulary> vocabulary_;
  std::vector<int32_t> class_of_;        // per state: its entry
  std::vector<int32_t> representative_;  // per entry: the state classified for it
  mutable std::unique_ptr<std::once_flag[]> once_;
  mutable std::vector<std::unique_ptr<StateTokens>> tokens_;
};

}  // namespace pagoda::grammar
