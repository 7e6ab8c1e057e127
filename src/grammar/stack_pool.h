// StackPool: the stacks of PDA runs, stored as interned (state, parent) nodes so that equal stacks
// have equal ids. Sets of stacks are then sets of ints, a step never copies a stack, and rolling
// back a token only needs the ids of the stacks before it.
//
// Scratch mode: nodes interned between begin_scratch() and end_scratch() go to a side table that
// end_scratch() drops, so speculative runs (checking a token without accepting it) leave the
// pool as it was.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace pagoda::grammar {

// Parent of the root rule's frame: popping it means the whole input is complete.
inline constexpr int32_t kEmptyStack = -1;
// Parent used by the mask cache's stack-free runs: popping it means "depends on the stack".
inline constexpr int32_t kUnknownStack = -2;

class StackPool {
 public:
  int32_t intern(int32_t state, int32_t parent);
  int32_t state(int32_t id) const { return node(id).state; }
  int32_t parent(int32_t id) const { return node(id).parent; }

  void begin_scratch() { in_scratch_ = true; }
  void end_scratch();

  size_t size() const { return nodes_.size(); }

 private:
  struct Node {
    int32_t state;
    int32_t parent;
  };
  static constexpr int32_t kScratchBit = int32_t{1} << 30;
  static uint64_t key(int32_t state, int32_t parent) {
    return (uint64_t{static_cast<uint32_t>(state)} << 32) | static_cast<uint32_t>(parent);
  }
  const Node& node(int32_t id) const {
    return (id & kScratchBit) ? scratch_nodes_[id & ~kScratchBit] : nodes_[id];
  }

  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, int32_t> index_;
  std::vector<Node> scratch_nodes_;
  std::unordered_map<uint64_t, int32_t> scratch_index_;
  bool in_scratch_ = false;
};

}  // namespace pagoda::grammar
