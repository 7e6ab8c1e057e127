// Ranks on several machines, over MPI (OpenMPI, which brings its own transports: shared memory
// within a machine, TCP or UCX between machines). Launched as `mpirun -np N pagoda ...`; a
// program started without mpirun is a group of one (MPI's singleton start).
//
// Built only when CMake found MPI (PAGODA_HAVE_MPI); the header hides every MPI type, so code
// that holds a Communicator& needs neither mpi.h nor a check.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

#include "parallel/communicator.h"

namespace pagoda {

class MpiCommunicator final : public Communicator {
 public:
  // How the process's threads call MPI: one at a time, though not always the one that
  // initialised it (a server builds its engine on the main thread and steps it on the engine
  // thread); or several at once (a pipeline link's sender thread beside the engine thread).
  enum class Threads { kSerialized, kMultiple };

  // Over MPI_COMM_WORLD. Initialises MPI if nobody has (and then finalises it in the
  // destructor), asking for MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE as `threads` says and
  // taking SERIALIZED at least (allows_concurrent_groups tells which it got). Only a pipeline
  // asks for MULTIPLE: Open MPI then locks around every call, which tensor parallelism's
  // all-reduces would pay for nothing. One such MpiCommunicator per process, and any number
  // made by split().
  explicit MpiCommunicator(Threads threads = Threads::kSerialized);
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
  // The thread level MPI gave the process (MPI_Query_thread) is MPI_THREAD_MULTIPLE. Open MPI
  // builds that support it give it when asked; another MPI, or a program that initialised MPI
  // itself at a lower level, may not.
  bool allows_concurrent_groups() const override { return thread_multiple_; }

  // 0 (the default): the collectives are MPI's blocking calls, which spin until done. Else
  // each is started non-blocking and polled with MPI_Test, busily for a few microseconds and
  // then with this sleep between looks, so a wait that lasts a peer's whole pipeline stage
  // leaves the core to this rank's compute threads (as ShmCommunicatorOptions::idle_sleep).
  // Polling is also what moves the bytes: Open MPI has no progress thread of its own.
  void set_idle_sleep(std::chrono::microseconds idle_sleep) { idle_sleep_ = idle_sleep; }

 private:
  struct Handle;  // the MPI_Comm, whose type mpi.h defines
  explicit MpiCommunicator(std::unique_ptr<Handle> handle);

  std::unique_ptr<Handle> comm_;
  int rank_ = 0;
  int world_size_ = 1;
  bool finalize_ = false;
  bool thread_multiple_ = false;
  std::chrono::microseconds idle_sleep_{0};
  std::vector<float> widened_;  // bf16 / f16 sums, grown to the largest call and kept
};

}  // namespace pagoda
