// The per-state token classification behind the mask cache.
#include "grammar/compiled_grammar.h"

#include "grammar/token_walker.h"

namespace pagoda::grammar {

CompiledGrammar::CompiledGrammar(Pda pda, std::shared_ptr<const Vocabulary> vocabulary)
    : pda_(std::move(pda)),
      vocabulary_(std::move(vocabulary)),
      once_(new std::once_flag[pda_.num_states()]),
      tokens_(pda_.num_states()) {}

const StateTokens& CompiledGrammar::state_tokens(int32_t state) const {
  std::call_once(once_[state],
                 [&] { tokens_[state] = std::make_unique<StateTokens>(classify(state)); });
  return *tokens_[state];
}

void CompiledGrammar::precompute() const {
  for (int32_t s = 0; s < pda_.num_states(); ++s) {
    if (!pda_.byte_edges(s).empty()) state_tokens(s);
  }
}

size_t CompiledGrammar::num_cached_states() const {
  size_t n = 0;
  for (int32_t s = 0; s < pda_.num_states(); ++s) {
    if (tokens_[s]) ++n;
  }
  return n;
}

size_t CompiledGrammar::cached_ids() const {
  size_t n = 0;
  for (const auto& t : tokens_) {
    if (t) n += t->ids.size() + t->uncertain.size();
  }
  return n;
}

// The state alone, with kUnknownStack beneath it: a token that some run consumes entirely is
// accepted under any stack; one whose runs all die without popping below the state's rule is
// rejected under any stack; the rest depend on the stack.
StateTokens CompiledGrammar::classify(int32_t state) const {
  StackPool pool;
  TokenWalker walker(pda_, pool);
  StackSet start;
  start.stacks.push_back(pool.intern(state, kUnknownStack));
  std::vector<int32_t> accepted;
  std::vector<int32_t> rejected;
  StateTokens out;
  walker.walk(start, vocabulary_->sorted_ids(), *vocabulary_, [&](int32_t id, TokenVerdict v) {
    if (v == TokenVerdict::kAccept) {
      accepted.push_back(id);
    } else if (v == TokenVerdict::kReject) {
      rejected.push_back(id);
    } else {
      out.uncertain.push_back(id);
    }
  });
  out.lists_rejected = rejected.size() < accepted.size();
  out.ids = out.lists_rejected ? std::move(rejected) : std::move(accepted);
  out.ids.shrink_to_fit();
  out.uncertain.shrink_to_fit();
  return out;
}

}  // namespace pagoda::grammar
