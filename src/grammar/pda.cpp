// Grammar -> Pda: a Thompson NFA per rule body, then epsilon removal (each state reached by a
// consuming or calling edge gets the edges and finality of its epsilon closure), then the checks
// that keep every run finite and the language non-empty.
#include "grammar/pda.h"

#include <algorithm>
#include <functional>
#include <unordered_set>

#include "grammar/grammar_error.h"

namespace pagoda::grammar {
namespace {

struct NfaState {
  std::vector<int32_t> epsilon;
  std::vector<std::pair<ByteSet, int32_t>> bytes;
  std::vector<std::pair<int32_t, int32_t>> calls;  // (rule, return state)
  bool is_final = false;
  int32_t rule_id = 0;
};

class NfaBuilder {
 public:
  NfaBuilder(const Grammar& grammar, int max_states) : grammar_(grammar), max_states_(max_states) {}

  int32_t new_state() {
    if (static_cast<int>(states_.size()) >= max_states_) {
      grammar_fail("grammar too large: rule '{}' needs more than {} automaton states",
                   grammar_.name(rule_), max_states_);
    }
    states_.emplace_back();
    states_.back().rule_id = rule_;
    return static_cast<int32_t>(states_.size() - 1);
  }

  // Builds `e` starting at state `from`; returns the state where it ends.
  int32_t build(const Expr& e, int32_t from) {
    switch (e.kind) {
      case Expr::Kind::kBytes: {
        const int32_t to = new_state();
        states_[from].bytes.emplace_back(e.bytes, to);
        return to;
      }
      case Expr::Kind::kSequence: {
        int32_t at = from;
        for (const auto& child : e.children) at = build(*child, at);
        return at;
      }
      case Expr::Kind::kChoice: {
        const int32_t end = new_state();
        for (const auto& child : e.children) {
          const int32_t begin = new_state();
          states_[from].epsilon.push_back(begin);
          const int32_t last = build(*child, begin);
          states_[last].epsilon.push_back(end);
        }
        return end;
      }
      case Expr::Kind::kRepeat: {
        const Expr& item = *e.children[0];
        int32_t at = from;
        for (int i = 0; i < e.min_count; ++i) at = build(item, at);
        if (e.max_count == Expr::kUnbounded) {
          const int32_t loop = new_state();
          states_[at].epsilon.push_back(loop);
          const int32_t last = build(item, loop);
          states_[last].epsilon.push_back(loop);
          return loop;
        }
        const int32_t end = new_state();
        states_[at].epsilon.push_back(end);
        for (int i = e.min_count; i < e.max_count; ++i) {
          at = build(item, at);
          states_[at].epsilon.push_back(end);
        }
        return end;
      }
      case Expr::Kind::kRuleRef: {
        const int32_t to = new_state();
        states_[from].calls.emplace_back(e.rule_id, to);
        return to;
      }
    }
    return from;
  }

  int32_t build_rule(int rule_id) {
    rule_ = rule_id;
    const ExprPtr& body = grammar_.body(rule_id);
    if (!body) grammar_fail("rule '{}' is used but never defined", grammar_.name(rule_id));
    const int32_t start = new_state();
    const int32_t end = build(*body, start);
    states_[end].is_final = true;
    return start;
  }

  std::vector<NfaState>& states() { return states_; }

 private:
  const Grammar& grammar_;
  int max_states_;
  int rule_ = 0;
  std::vector<NfaState> states_;
};

}  // namespace

Pda Pda::compile(const Grammar& grammar, int max_nfa_states) {
  if (grammar.num_rules() == 0) grammar_fail("grammar has no rules");
  NfaBuilder builder(grammar, max_nfa_states);
  std::vector<int32_t> nfa_starts;
  for (int r = 0; r < grammar.num_rules(); ++r) nfa_starts.push_back(builder.build_rule(r));
  auto& nfa = builder.states();

  // The states that survive: rule starts and every target of a byte or call edge, numbered in
  // the order a breadth-first walk from the starts reaches them (unreachable ones vanish).
  std::vector<int32_t> new_id(nfa.size(), -1);
  std::vector<int32_t> order;
  auto keep = [&](int32_t s) {
    if (new_id[s] < 0) {
      new_id[s] = static_cast<int32_t>(order.size());
      order.push_back(s);
    }
  };
  for (int32_t s : nfa_starts) keep(s);

  Pda pda;
  pda.root_rule_ = grammar.root();
  for (int r = 0; r < grammar.num_rules(); ++r) {
    pda.rule_starts_.push_back(new_id[nfa_starts[r]]);
    pda.rule_names_.push_back(grammar.name(r));
  }

  std::vector<uint32_t> seen(nfa.size(), 0);
  uint32_t stamp = 0;
  std::vector<int32_t> closure;
  std::vector<int32_t> stack;
  // The byte edge of the current state per target (valid where edge_stamp == stamp).
  std::vector<uint32_t> edge_stamp(nfa.size(), 0);
  std::vector<uint32_t> edge_index(nfa.size(), 0);
  std::unordered_set<uint64_t> rule_edges_seen;
  // Epsilon removal can be quadratic (a chain of optional items gives every state the edges of
  // all that follow): bound the work and the output, so no grammar stalls the compiler or
  // takes gigabytes.
  const size_t max_work = static_cast<size_t>(max_nfa_states) * 16;
  const size_t max_edges = static_cast<size_t>(max_nfa_states) * 4;
  size_t work = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const int32_t original = order[i];
    ++stamp;
    closure.clear();
    stack.assign(1, original);
    seen[original] = stamp;
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      closure.push_back(s);
      for (int32_t t : nfa[s].epsilon) {
        if (seen[t] != stamp) {
          seen[t] = stamp;
          stack.push_back(t);
        }
      }
    }
    work += closure.size();
    if (work > max_work || pda.byte_edges_.size() + pda.rule_edges_.size() > max_edges) {
      grammar_fail("grammar too large: rule '{}' expands to more than {} automaton edges",
                   grammar.name(nfa[original].rule_id), max_edges);
    }
    rule_edges_seen.clear();
    State state;
    state.rule_id = nfa[original].rule_id;
    state.first_byte_edge = static_cast<uint32_t>(pda.byte_edges_.size());
    state.first_rule_edge = static_cast<uint32_t>(pda.rule_edges_.size());
    for (int32_t s : closure) {
      state.is_final = state.is_final || nfa[s].is_final;
      for (const auto& [set, target] : nfa[s].bytes) {
        keep(target);
        // One edge per target: the sets of parallel edges merge.
        const int32_t to = new_id[target];
        if (edge_stamp[to] != stamp) {
          edge_stamp[to] = stamp;
          edge_index[to] = static_cast<uint32_t>(pda.byte_edges_.size());
          pda.byte_edges_.push_back({set, to});
        } else {
          pda.byte_edges_[edge_index[to]].bytes |= set;
        }
      }
      for (const auto& [rule, target] : nfa[s].calls) {
        keep(target);
        const uint64_t key =
            (uint64_t{static_cast<uint32_t>(rule)} << 32) | static_cast<uint32_t>(new_id[target]);
        if (rule_edges_seen.insert(key).second) pda.rule_edges_.push_back({rule, new_id[target]});
      }
    }
    state.num_byte_edges = static_cast<uint32_t>(pda.byte_edges_.size()) - state.first_byte_edge;
    state.num_rule_edges = static_cast<uint32_t>(pda.rule_edges_.size()) - state.first_rule_edge;
    pda.states_.push_back(state);
  }
  pda.check_language(grammar);
  return pda;
}

// A rule is nullable when it can finish without consuming a byte, productive when it can finish
// at all. Runs expand calls eagerly, so a rule that calls itself before consuming anything (left
// recursion, possibly through nullable rules) would push forever: rejected here.
void Pda::check_language(const Grammar& grammar) const {
  const int n = num_rules();
  // Reachable states of rule r following byte edges (when `consume`) and calls into rules for
  // which `callable` holds; true when a final state is reached.
  auto reaches_final = [&](int r, bool consume, const std::vector<char>& callable,
                           const std::function<void(const RuleEdge&)>& on_call) {
    std::vector<int32_t> stack{rule_starts_[r]};
    std::vector<char> seen(states_.size(), 0);
    seen[rule_starts_[r]] = 1;
    bool final_reached = false;
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      final_reached = final_reached || states_[s].is_final;
      auto visit = [&](int32_t t) {
        if (!seen[t]) {
          seen[t] = 1;
          stack.push_back(t);
        }
      };
      if (consume) {
        for (const auto& e : byte_edges(s)) visit(e.target);
      }
      for (const auto& e : rule_edges(s)) {
        if (on_call) on_call(e);
        if (callable[e.rule_id]) visit(e.target);
      }
    }
    return final_reached;
  };

  std::vector<char> nullable(n, 0);
  std::vector<char> productive(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (int r = 0; r < n; ++r) {
      if (!nullable[r] && reaches_final(r, false, nullable, nullptr)) nullable[r] = changed = true;
      if (!productive[r] && reaches_final(r, true, productive, nullptr)) {
        productive[r] = changed = true;
      }
    }
  }
  // Left calls: rules called before any byte is consumed.
  std::vector<std::vector<int>> left_calls(n);
  for (int r = 0; r < n; ++r) {
    reaches_final(r, false, nullable,
                  [&](const RuleEdge& e) { left_calls[r].push_back(e.rule_id); });
  }
  std::vector<int> color(n, 0);  // 0 new, 1 on the path, 2 done
  std::vector<int> path;
  std::function<void(int)> visit = [&](int r) {
    color[r] = 1;
    path.push_back(r);
    for (int q : left_calls[r]) {
      if (color[q] == 1) {
        std::string cycle;
        auto it = std::find(path.begin(), path.end(), q);
        for (; it != path.end(); ++it) cycle += grammar.name(*it) + " -> ";
        grammar_fail("left recursion is not supported: {}{}", cycle, grammar.name(q));
      }
      if (color[q] == 0) visit(q);
    }
    path.pop_back();
    color[r] = 2;
  };
  for (int r = 0; r < n; ++r) {
    if (color[r] == 0) visit(r);
  }
  if (!productive[root_rule_]) {
    grammar_fail("the grammar's language is empty: rule '{}' can never finish",
                 grammar.name(root_rule_));
  }
}

}  // namespace pagoda::grammar
