// The one interface tensor and pipeline parallelism talk to: a group of ranks that sum, gather
// and broadcast buffers. Three implementations sit behind it: a single process (world size 1),
// ranks on one machine over a shared-memory segment (shm_communicator.h), and ranks on several
// machines over MPI (mpi_communicator.h). Model layers hold a Communicator&; they never know
// which transport carries their bytes.
//
// Every collective is blocking and must be called by every rank of the group in the same order
// with the same sizes (as MPI requires): the implementations pair calls up by their order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "util/dtype.h"
#include "util/half.h"

namespace pagoda {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // data[0, count) := the element-wise sum of every rank's data[0, count). dtype is kF32, kBF16
  // or kF16; 16-bit values are summed in fp32 and rounded once, so a sum of N bf16 tensors
  // loses no more than one rounding (what a row-parallel linear's partial outputs need).
  // Every rank receives the same bits.
  virtual void all_reduce_sum(void* data, size_t count, DType dtype) = 0;

  // recv[r * bytes_per_rank, (r + 1) * bytes_per_rank) := rank r's send[0, bytes_per_rank),
  // for every rank r (rank-major, as MPI_Allgather). send and recv must not overlap.
  virtual void all_gather(const void* send, void* recv, size_t bytes_per_rank) = 0;

  // data[0, bytes) := root's data[0, bytes) on every rank.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;

  // Returns once every rank has called it.
  virtual void barrier() = 0;

  // Whether a second thread of this process may call this group while another thread calls
  // another group: what a queued PairLink's sender thread does (parallel/pair_link.h). Separate
  // shared-memory segments share nothing; MPI allows it only at MPI_THREAD_MULTIPLE.
  virtual bool allows_concurrent_groups() const { return true; }

  // Typed forms of all_reduce_sum (named apart, so that overriding it hides none of them).
  void all_reduce_sum_f32(std::span<float> data) {
    all_reduce_sum(data.data(), data.size(), DType::kF32);
  }
  void all_reduce_sum_bf16(std::span<bf16_t> data) {
    all_reduce_sum(data.data(), data.size(), DType::kBF16);
  }
  void all_reduce_sum_f16(std::span<f16_t> data) {
    all_reduce_sum(data.data(), data.size(), DType::kF16);
  }
};

// World size 1: every collective is the identity, so single-process code runs the same path
// as tensor-parallel code.
class SingleProcessCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  void all_reduce_sum(void* data, size_t count, DType dtype) override;
  void all_gather(const void* send, void* recv, size_t bytes_per_rank) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void barrier() override {}
};

// Checks shared by the implementations: dtype is one all_reduce_sum can sum, root is a rank.
void check_reduce_dtype(DType dtype);
void check_root(int root, int world_size);

}  // namespace pagoda
