// GrammarMatcher: one request's position in a compiled grammar. It accepts tokens (or raw bytes),
// fills the bitmask of tokens allowed next, rolls back the last n tokens (speculative decoding
// rejects drafts), and reports termination (a stop token accepted where the grammar may end).
//
// Not thread-safe: one matcher per request, used by the thread that samples it. The compiled
// grammar it holds is shared.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "grammar/compiled_grammar.h"
#include "grammar/pda_runner.h"
#include "grammar/stack_pool.h"
#include "grammar/token_walker.h"

namespace pagoda::grammar {

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);

  // False (and no change) when the grammar does not allow the token here. A stop token is
  // allowed where the grammar can end, and terminates the matcher.
  bool accept_token(int32_t token_id);
  // Bytes that are not a token (a forced prefix); counts as one step for rollback.
  bool accept_bytes(std::string_view bytes);
  // Ends the input as a stop token does (one step), for stop tokens the vocabulary does not
  // list (a request's own stop_token_ids). False (and no change) where the grammar cannot end.
  bool accept_stop();

  // Sets exactly the bits of the tokens accept_token would take; `bitmask` has
  // vocabulary().mask_words() words, bit i of word i / 32 for token i.
  void fill_next_token_bitmask(std::span<uint32_t> bitmask);

  // Undoes the last `num_steps` accepted tokens (or accept_bytes calls). False when fewer were
  // accepted; then nothing changes.
  bool rollback(int num_steps);
  void reset();

  bool is_terminated() const { return history_.back().terminated; }
  // The input so far is a complete sentence of the grammar.
  bool can_terminate() const { return history_.back().set.can_end; }
  // Bytes the grammar allows next (for tests and tools that generate from a grammar).
  ByteSet next_bytes();
  int num_steps() const { return static_cast<int>(history_.size()) - 1; }

  const CompiledGrammar& grammar() const { return *grammar_; }

 private:
  struct Step {
    StackSet set;
    bool terminated = false;
  };
  bool step_bytes(std::string_view bytes, StackSet& out);

  std::shared_ptr<const CompiledGrammar> grammar_;
  StackPool pool_;
  PdaRunner runner_;
  TokenWalker walker_;
  std::vector<Step> history_;  // history_[0] is the start; back() is now
  StackSet scratch_[2];
  // Buffers reused by every mask, so a step allocates nothing once warm.
  std::vector<uint32_t> rejected_form_;
  std::vector<int32_t> top_states_;
  StackSet walk_start_;
};

}  // namespace pagoda::grammar
