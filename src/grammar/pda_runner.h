// PdaRunner: the moves of a PDA run over a set of stacks. A StackSet is always closed: every call
// reachable without consuming input has been pushed and every finished rule popped, and only the
// stacks whose top state can consume a byte are kept (the others cannot take part in the next
// step). Popping the last frame sets can_end; popping kUnknownStack sets reached_unknown.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_set>
#include <vector>

#include "grammar/byte_set.h"
#include "grammar/pda.h"
#include "grammar/stack_pool.h"

namespace pagoda::grammar {

struct StackSet {
  std::vector<int32_t> stacks;
  bool can_end = false;          // the input so far is a complete sentence
  bool reached_unknown = false;  // some run popped into the unknown rest of the stack

  bool dead() const { return stacks.empty(); }
  void clear() {
    stacks.clear();
    can_end = false;
    reached_unknown = false;
  }
};

class PdaRunner {
 public:
  PdaRunner(const Pda& pda, StackPool& pool) : pda_(&pda), pool_(&pool) {}

  // The closed set of stacks reachable from `seeds` (stack ids) without consuming input.
  void close(std::span<const int32_t> seeds, StackSet& out);
  // The set after consuming `byte` from `in` (closed). False when no stack can take the byte.
  bool advance(const StackSet& in, uint8_t byte, StackSet& out);
  // The bytes some stack of `set` can consume next.
  ByteSet next_bytes(const StackSet& set) const;
  // The closed set at the start of `rule_id` with `parent` below it.
  void start(int rule_id, int32_t parent, StackSet& out);

 private:
  const Pda* pda_;
  StackPool* pool_;
  std::vector<int32_t> work_;
  std::vector<int32_t> seeds_;
  bool first_visit(int32_t id);

  std::vector<int32_t> visited_;
  std::unordered_set<int32_t> visited_set_;  // used once visited_ is long
};

}  // namespace pagoda::grammar
