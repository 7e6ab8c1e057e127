// The per-state token classification behind the mask cache.
#include "grammar/compiled_grammar.h"

#include <algorithm>

#include "grammar/state_classes.h"
#include "grammar/token_walker.h"

namespace pagoda::grammar {

CompiledGrammar::CompiledGrammar(Pda pda, std::shared_ptr<const Vocabulary> vocabulary)
    : pda_(std::move(pda)),
      vocabulary_(std::move(vocabulary)),
      class_of_(token_equivalent_states(pda_, vocabulary_->max_token_bytes())) {
  const int32_t num_classes =
      class_of_.empty() ? 0 : *std::max_element(class_of_.begin(), class_of_.end()) + 1;
  representative_.assign(num_classes, -1);
  for (int32_t s = 0; s < pda_.num_states(); ++s) {
    if (representative_[class_of_[s]] < 0) representative_[class_of_[s]] = s;
  }
  once_.reset(new std::once_flag[num_classes]);
  tokens_.resize(num_classes);
}

const StateTokens& CompiledGrammar::state_tokens(int32_t state) const {
  const int32_t c = class_of_[state];
  std::call_once(once_[c],
                 [&] { tokens_[c] = std::make_unique<StateTokens>(classify(representative_[c])); });
  return *tokens_[c];
}
void CompiledGrammar::precompute() const {
  for (int32_t s = 0; s < pda_.num_states(); ++s) {
    if (!pda_.byte_edges(s).empty()) state_tokens(s);
  }
}

size_t CompiledGrammar::num_cached_states() const {
  size_t n = 0;
  for (const auto& t : tokens_) n += t ? 1 : 0;
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
