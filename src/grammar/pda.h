// Pda: the byte-level pushdown automaton every grammar compiles to. Each rule becomes an
// epsilon-free NFA; its states carry byte edges (consume one byte in the set, go to target) and
// rule edges (run the called rule to one of its final states, then continue at target). A run
// keeps a stack of return states, so recursion ($ref, nested JSON) is exact, while the bytes
// inside a rule stay in one NFA, which is what lets the mask cache classify most tokens without
// looking at the stack (mask_cache.h).
//
// compile() rejects grammars whose runs would not terminate (left recursion) and grammars whose
// language is empty, naming the rule.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "grammar/byte_set.h"
#include "grammar/grammar.h"

namespace pagoda::grammar {

class Pda {
 public:
  struct ByteEdge {
    ByteSet bytes;
    int32_t target;
  };
  struct RuleEdge {
    int32_t rule_id;
    int32_t target;  // the return state
  };

  // Throws GrammarError. `max_nfa_states` bounds the work a pathological grammar can cause
  // (huge repetition counts, deep unrolling).
  static Pda compile(const Grammar& grammar, int max_nfa_states = 400000);

  int num_states() const { return static_cast<int>(states_.size()); }
  int num_rules() const { return static_cast<int>(rule_starts_.size()); }
  int root_rule() const { return root_rule_; }
  int32_t start_state(int rule_id) const { return rule_starts_[rule_id]; }
  const std::string& rule_name(int rule_id) const { return rule_names_[rule_id]; }

  bool is_final(int32_t state) const { return states_[state].is_final; }
  int rule_of(int32_t state) const { return states_[state].rule_id; }
  std::span<const ByteEdge> byte_edges(int32_t state) const {
    const auto& s = states_[state];
    return {byte_edges_.data() + s.first_byte_edge, s.num_byte_edges};
  }
  std::span<const RuleEdge> rule_edges(int32_t state) const {
    const auto& s = states_[state];
    return {rule_edges_.data() + s.first_rule_edge, s.num_rule_edges};
  }

 private:
  struct State {
    int32_t rule_id = 0;
    bool is_final = false;
    uint32_t first_byte_edge = 0;
    uint32_t num_byte_edges = 0;
    uint32_t first_rule_edge = 0;
    uint32_t num_rule_edges = 0;
  };

  void check_language(const Grammar& grammar) const;

  std::vector<State> states_;
  std::vector<ByteEdge> byte_edges_;
  std::vector<RuleEdge> rule_edges_;
  std::vector<int32_t> rule_starts_;
  std::vector<std::string> rule_names_;
  int root_rule_ = 0;
};

}  // namespace pagoda::grammar
