// A Communicator that counts what passes through another one: calls, bytes and the seconds
// spent inside the collectives (waiting for the slowest rank included). The tensor-parallel
// executor reads it around each step to report communication per decode step and per prefill
// token (docs/parallel.md, "Measuring").
#pragma once

#include <cstdint>
#include <memory>

#include "parallel/communicator.h"

namespace pagoda {

struct CommunicationStats {
  int64_t num_calls = 0;
  int64_t bytes = 0;  // this rank's payload: the reduced, gathered or broadcast buffer
  double seconds = 0;

  CommunicationStats operator-(const CommunicationStats& before) const {
    return {num_calls - before.num_calls, bytes - before.bytes, seconds - before.seconds};
  }
};

class CountingCommunicator final : public Communicator {
 public:
  explicit CountingCommunicator(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {}

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  void all_reduce_sum(void* data, size_t count, DType dtype) override;
  void all_gather(const void* send, void* recv, size_t bytes_per_rank) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void barrier() override;
  bool allows_concurrent_groups() const override { return inner_->allows_concurrent_groups(); }

  // Totals since construction.
  const CommunicationStats& stats() const { return stats_; }

 private:
  template <typename Call>
  void count(size_t bytes, Call call);

  std::unique_ptr<Communicator> inner_;
  CommunicationStats stats_;
};

}  // namespace pagoda
