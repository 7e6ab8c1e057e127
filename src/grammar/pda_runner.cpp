// The push/pop closure and the byte step of PDA runs.
#include "grammar/pda_runner.h"

#include <algorithm>

namespace pagoda::grammar {

// Closures are usually a handful of stacks: a linear scan beats hashing until the set grows.
bool PdaRunner::first_visit(int32_t id) {
  if (visited_.size() < 32) {
    if (std::find(visited_.begin(), visited_.end(), id) != visited_.end()) return false;
    visited_.push_back(id);
    if (visited_.size() == 32) visited_set_.insert(visited_.begin(), visited_.end());
    return true;
  }
  if (!visited_set_.insert(id).second) return false;
  visited_.push_back(id);
  return true;
}

void PdaRunner::close(std::span<const int32_t> seeds, StackSet& out) {
  out.clear();
  if (visited_.size() >= 32) visited_set_.clear();
  visited_.clear();
  work_.assign(seeds.begin(), seeds.end());
  while (!work_.empty()) {
    const int32_t id = work_.back();
    work_.pop_back();
    if (!first_visit(id)) continue;
    const int32_t state = pool_->state(id);
    const int32_t parent = pool_->parent(id);
    if (!pda_->byte_edges(state).empty()) out.stacks.push_back(id);
    for (const auto& call : pda_->rule_edges(state)) {
      const int32_t frame = pool_->intern(call.target, parent);
      work_.push_back(pool_->intern(pda_->start_state(call.rule_id), frame));
    }
    if (pda_->is_final(state)) {
      if (parent == kEmptyStack) {
        out.can_end = true;
      } else if (parent == kUnknownStack) {
        out.reached_unknown = true;
      } else {
        work_.push_back(parent);  // the caller continues at its return state
      }
    }
  }
}

bool PdaRunner::advance(const StackSet& in, uint8_t byte, StackSet& out) {
  seeds_.clear();
  for (const int32_t id : in.stacks) {
    const int32_t state = pool_->state(id);
    for (const auto& edge : pda_->byte_edges(state)) {
      if (edge.bytes.contains(byte))
        seeds_.push_back(pool_->intern(edge.target, pool_->parent(id)));
    }
  }
  if (seeds_.empty()) {
    out.clear();
    return false;
  }
  close(seeds_, out);
  return true;
}

ByteSet PdaRunner::next_bytes(const StackSet& set) const {
  ByteSet bytes;
  for (const int32_t id : set.stacks) {
    for (const auto& edge : pda_->byte_edges(pool_->state(id))) bytes |= edge.bytes;
  }
  return bytes;
}

void PdaRunner::start(int rule_id, int32_t parent, StackSet& out) {
  const int32_t seed = pool_->intern(pda_->start_state(rule_id), parent);
  close(std::span<const int32_t>(&seed, 1), out);
}

}  // namespace pagoda::grammar
