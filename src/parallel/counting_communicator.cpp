#include "parallel/counting_communicator.h"

#include <chrono>

namespace pagoda {

template <typename Call>
void CountingCommunicator::count(size_t bytes, Call call) {
  const auto start = std::chrono::steady_clock::now();
  call();
  stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stats_.num_calls += 1;
  stats_.bytes += static_cast<int64_t>(bytes);
}

void CountingCommunicator::all_reduce_sum(void* data, size_t num_values, DType dtype) {
  count(num_values * static_cast<size_t>(dtype_size(dtype)),
        [&] { inner_->all_reduce_sum(data, num_values, dtype); });
}

void CountingCommunicator::all_gather(const void* send, void* recv, size_t bytes_per_rank) {
  count(bytes_per_rank * static_cast<size_t>(world_size()),
        [&] { inner_->all_gather(send, recv, bytes_per_rank); });
}

void CountingCommunicator::broadcast(void* data, size_t bytes, int root) {
  count(bytes, [&] { inner_->broadcast(data, bytes, root); });
}

void CountingCommunicator::barrier() {
  count(0, [&] { inner_->barrier(); });
}

}  // namespace pagoda
