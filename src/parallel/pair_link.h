// Point-to-point between two ranks, for pipeline parallelism: a stage sends its hidden states
// to the next stage, the last stage sends the logits back to rank 0. The link is a group of
// exactly two ranks of any Communicator transport (shared memory, MPI), and a send is a
// broadcast rooted at the sender: with two ranks a broadcast moves the bytes one way, once.
// Like every collective it blocks until the other side has taken part, so the two ends must
// call send and receive in the same order with the same sizes.
#pragma once

#include <cstddef>
#include <memory>

#include "parallel/communicator.h"

namespace pagoda {

class PairLink {
 public:
  // `group` has world size 2; this end is its rank().
  explicit PairLink(std::unique_ptr<Communicator> group);

  void send(const void* data, size_t bytes);
  void receive(void* data, size_t bytes);

  // Bytes sent and received so far, for the communication summary.
  size_t bytes() const { return bytes_; }

 private:
  std::unique_ptr<Communicator> group_;
  size_t bytes_ = 0;
};

}  // namespace pagoda
