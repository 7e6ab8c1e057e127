// A rank's place in a tensor-parallel group, as the model and its layers see it: which part of
// each split dimension (heads, intermediate rows, vocabulary) this rank holds, and the
// communicator its row-parallel layers sum over. With no communicator (or a group of one) every
// split is the whole dimension and no layer communicates. After Megatron-LM's column- and
// row-parallel split (Shoeybi et al. 2019, "Megatron-LM", section 3).
#pragma once

#include <cstdint>

#include "parallel/communicator.h"

namespace pagoda {

// Items [first, first + count) of a split dimension.
struct DimShard {
  int64_t first = 0;
  int64_t count = 0;
};

class TensorParallel {
 public:
  TensorParallel() = default;
  // `communicator` must outlive the model; nullptr means one process.
  explicit TensorParallel(Communicator* communicator) : communicator_(communicator) {}

  int rank() const { return communicator_ != nullptr ? communicator_->rank() : 0; }
  int size() const { return communicator_ != nullptr ? communicator_->world_size() : 1; }
  bool enabled() const { return size() > 1; }
  // The group to sum over, or nullptr when there is nothing to sum (one rank).
  Communicator* reducer() const { return enabled() ? communicator_ : nullptr; }

  // `total` items split evenly (heads, intermediate rows); throws Error naming `what` when the
  // group size does not divide it.
  DimShard even_split(int64_t total, const char* what) const;
  // `total` items in parts of padded_part(total), the last rank's shorter (a vocabulary, which
  // rarely divides evenly); throws Error when a rank would get nothing.
  DimShard padded_split(int64_t total) const;
  int64_t padded_part(int64_t total) const { return (total + size() - 1) / size(); }

 private:
  Communicator* communicator_ = nullptr;
};

}  // namespace pagoda
