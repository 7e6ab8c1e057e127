// Token-equivalent PDA states: states that give every token the same verdict when run alone
// (accepted, rejected, or depends on the stack) can share one entry of the mask cache. This
// matters for unrolled repetitions — a string with maxLength 1000 has a state per position, but
// all positions further than the longest token from the end behave alike — and for the repeated
// shapes of generated schemas.
//
// Computed as a depth-bounded bisimulation: at depth d, two states are equivalent when they agree
// on finality, their byte edges match (same byte set, targets equivalent at depth d - 1) and
// their rule edges match (same rule, return states equivalent at depth d: a nullable call
// returns without consuming). Bisimilar states accept the same byte strings, so after as many
// rounds as the longest token has bytes, or once the partition stops changing, one class means
// one verdict for every token.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "grammar/pda.h"

namespace pagoda::grammar {

// Class id per state (dense, from 0). Grammars above `max_states` states get one class per state
// (the refinement would cost more than it saves).
std::vector<int32_t> token_equivalent_states(const Pda& pda, size_t max_depth,
                                             int max_states = 200000);

}  // namespace pagoda::grammar
