// Ranks on several machines, over MPI (OpenMPI, which brings its own transports: shared memory
// within a machine, TCP or UCX between machines). Launched as `mpirun -np N pagoda ...`; a
// program started without mpirun is a group of one (MPI's singleton start).
//
// Built only when CMake found MPI (PAGODA_HAVE_MPI); the header hides every MPI type, so code
// that holds a Communicator& needs neither mpi.h nor a check.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "parallel/communicator.h"

namespace pagoda {

class MpiCommunicator final : public Communicator {
 public:
  // Over MPI_COMM_WORLD. Initialises MPI if nobody has (and then finalises it in the
  // destructor); one such MpiCommunicator per process, and any number made by split().
  MpiCommunicator();
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  // The ranks of this communicator that pass the same `color` (>= 0), numbered by `key` (ties
  // by rank here), as one new communicator (MPI_Comm_split); nullptr for a rank that passes a
  // negative color. Collective: every rank of this communicator calls it, in the same order.
  // A pipeline's stage groups and two-rank links are such splits of the world. The result
  // must be destroyed before the communicator that made the world.
  std::unique_ptr<MpiCommunicator> split(int color, int key);

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  // fp32 goes to MPI_Allreduce in place. MPI has no 16-bit float type, so bf16 and f16 are
  // widened into an fp32 buffer, summed there and rounded once (the shared-memory version's
  // result up to MPI's order of summation).
  void all_reduce_sum(void* data, size_t count, DType dtype) override;
  void all_gather(const void* send, void* recv, size_t bytes_per_rank) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void barrier() override;

 private:
  struct Handle;  // the MPI_Comm, whose type mpi.h defines
  explicit MpiCommunicator(std::unique_ptr<Handle> handle);

  std::unique_ptr<Handle> comm_;
  int rank_ = 0;
  int world_size_ = 1;
  bool finalize_ = false;
  std::vector<float> widened_;  // bf16 / f16 sums, grown to the largest call and kept
};

}  // namespace pagoda
