// Token acceptance, rollback and the cached-plus-checked token mask.
#include "grammar/grammar_matcher.h"

#include <algorithm>

namespace pagoda::grammar {

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)),
      runner_(grammar_->pda(), pool_),
      walker_(grammar_->pda(), pool_) {
  reset();
}

void GrammarMatcher::reset() {
  history_.assign(1, Step{});
  runner_.start(grammar_->pda().root_rule(), kEmptyStack, history_[0].set);
}

bool GrammarMatcher::step_bytes(std::string_view bytes, StackSet& out) {
  const StackSet* from = &history_.back().set;
  int which = 0;
  for (const char c : bytes) {
    StackSet& to = scratch_[which];
    if (!runner_.advance(*from, static_cast<uint8_t>(c), to)) return false;
    from = &to;
    which ^= 1;
  }
  out = *from;
  return true;
}

bool GrammarMatcher::accept_token(int32_t token_id) {
  const Vocabulary& vocab = grammar_->vocabulary();
  if (is_terminated() || token_id < 0 || static_cast<size_t>(token_id) >= vocab.size())
    return false;
  if (vocab.is_stop(token_id)) return accept_stop();
  const std::string& bytes = vocab.bytes(token_id);
  if (bytes.empty()) return false;
  return accept_bytes(bytes);
}

bool GrammarMatcher::accept_stop() {
  if (is_terminated() || !can_terminate()) return false;
  Step step{history_.back().set, true};
  history_.push_back(std::move(step));
  return true;
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  if (is_terminated()) return false;
  Step step;
  if (!step_bytes(bytes, step.set)) return false;
  history_.push_back(std::move(step));
  return true;
}

bool GrammarMatcher::rollback(int num_steps) {
  if (num_steps < 0 || num_steps > this->num_steps()) return false;
  history_.resize(history_.size() - num_steps);
  return true;
}

ByteSet GrammarMatcher::next_bytes() {
  if (is_terminated()) return {};
  return runner_.next_bytes(history_.back().set);
}

void GrammarMatcher::fill_next_token_bitmask(std::span<uint32_t> bitmask) {
  std::fill(bitmask.begin(), bitmask.end(), 0);
  if (is_terminated()) return;
  const Vocabulary& vocab = grammar_->vocabulary();
  const StackSet& now = history_.back().set;
  if (now.can_end) {
    for (const int32_t id : vocab.stop_token_ids()) set_bit(bitmask, id);
  }

  // Certain tokens: once per distinct top state.
  std::vector<int32_t>& states = top_states_;
  states.clear();
  for (const int32_t id : now.stacks) states.push_back(pool_.state(id));
  std::sort(states.begin(), states.end());
  states.erase(std::unique(states.begin(), states.end()), states.end());
  for (const int32_t state : states) {
    const StateTokens& tokens = grammar_->state_tokens(state);
    if (!tokens.lists_rejected) {
      for (const int32_t id : tokens.ids) set_bit(bitmask, id);
      continue;
    }
    const auto normal = vocab.normal_mask();
    rejected_form_.assign(normal.begin(), normal.end());
    for (const int32_t id : tokens.ids) clear_bit(rejected_form_, id);
    for (const int32_t id : tokens.uncertain) clear_bit(rejected_form_, id);
    for (size_t w = 0; w < bitmask.size(); ++w) bitmask[w] |= rejected_form_[w];
  }

  // Uncertain tokens: run them with the real stack under each top.
  pool_.begin_scratch();
  for (const int32_t stack_id : now.stacks) {
    const StateTokens& tokens = grammar_->state_tokens(pool_.state(stack_id));
    if (tokens.uncertain.empty()) continue;
    StackSet& start = walk_start_;
    start.clear();
    start.stacks.push_back(stack_id);
    walker_.walk(start, tokens.uncertain, vocab, [&](int32_t id, TokenVerdict v) {
      if (v == TokenVerdict::kAccept) set_bit(bitmask, id);
    });
  }
  pool_.end_scratch();
}

}  // namespace pagoda::grammar
