// Interning of PDA stack nodes, with a scratch side table for speculative runs.
#include "grammar/stack_pool.h"

namespace pagoda::grammar {

int32_t StackPool::intern(int32_t state, int32_t parent) {
  const uint64_t k = key(state, parent);
  if (auto it = index_.find(k); it != index_.end()) return it->second;
  if (!in_scratch_) {
    const auto id = static_cast<int32_t>(nodes_.size());
    nodes_.push_back({state, parent});
    index_.emplace(k, id);
    return id;
  }
  if (auto it = scratch_index_.find(k); it != scratch_index_.end()) return it->second;
  const auto id = static_cast<int32_t>(scratch_nodes_.size()) | kScratchBit;
  scratch_nodes_.push_back({state, parent});
  scratch_index_.emplace(k, id);
  return id;
}

void StackPool::end_scratch() {
  in_scratch_ = false;
  scratch_nodes_.clear();
  scratch_index_.clear();
}

}  // namespace pagoda::grammar
