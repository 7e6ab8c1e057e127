#include "parallel/communicator.h"

#include <cstring>

#include "util/error.h"

namespace pagoda {

void check_reduce_dtype(DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16) {
    fail("all_reduce_sum: cannot sum {} tensors (f32, bf16 or f16 only)", dtype_name(dtype));
  }
}

void check_root(int root, int world_size) {
  if (root < 0 || root >= world_size) {
    fail("broadcast: root {} is not a rank of a group of {}", root, world_size);
  }
}

void SingleProcessCommunicator::all_reduce_sum(void* data, size_t count, DType dtype) {
  check_reduce_dtype(dtype);
}

void SingleProcessCommunicator::all_gather(const void* send, void* recv, size_t bytes_per_rank) {
  if (bytes_per_rank > 0) std::memcpy(recv, send, bytes_per_rank);
}

void SingleProcessCommunicator::broadcast(void* data, size_t bytes, int root) {
  check_root(root, 1);
}

}  // namespace pagoda
