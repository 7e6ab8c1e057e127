#include "parallel/pair_link.h"

#include "util/error.h"

namespace pagoda {

PairLink::PairLink(std::unique_ptr<Communicator> group) : group_(std::move(group)) {
  if (group_ == nullptr || group_->world_size() != 2)
    fail("a point-to-point link needs a group of exactly 2 ranks");
}

void PairLink::send(const void* data, size_t bytes) {
  // broadcast takes a mutable buffer because receivers write it; the root's is only read.
  group_->broadcast(const_cast<void*>(data), bytes, group_->rank());
  bytes_ += bytes;
}

void PairLink::receive(void* data, size_t bytes) {
  group_->broadcast(data, bytes, 1 - group_->rank());
  bytes_ += bytes;
}

}  // namespace pagoda
