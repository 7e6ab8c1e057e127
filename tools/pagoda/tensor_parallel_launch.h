// `-tp N` on one machine: the flags, and rank 0 starting ranks 1..N-1 as copies of itself (the
// same binary and arguments, plus the hidden --tensor-parallel-rank and --tensor-parallel-job-id)
// that load their shards and follow rank 0's steps (docs/parallel.md).
#pragma once

#include <sys/types.h>

#include <vector>

#include <CLI/CLI.hpp>

#include "pagoda/engine.h"

namespace pagoda::cli {

// --tensor-parallel-size (-tp), and the hidden flags a follower rank is started with.
void add_tensor_parallel_options(CLI::App* app, EngineArgs& args);

// Started by mpirun (Open MPI's OMPI_COMM_WORLD_* or a PMI's PMI_* variables name a world of
// more than one process): args become that rank of an MPI group, which must be as large as
// --tensor-parallel-size x --pipeline-parallel-size. Fails with the reason when they differ.
// Does nothing otherwise.
void adopt_mpi_rank(EngineArgs& args);

// The processes of ranks 1..N-1, started by rank 0 (not under mpirun, which starts them).
class FollowerRanks {
 public:
  // When args ask for N > 1 ranks and this is rank 0: gives args a job id and starts the
  // others. Does nothing otherwise.
  explicit FollowerRanks(EngineArgs& args);
  // Waits for the followers, which return once the engine told them to stop; when leaving by
  // an exception (the engine failed), stops them first. Never waits more than a few seconds.
  ~FollowerRanks();
  FollowerRanks(const FollowerRanks&) = delete;
  FollowerRanks& operator=(const FollowerRanks&) = delete;

 private:
  std::vector<pid_t> pids_;
};

// A follower rank (args.tensor_parallel_rank >= 1): dies with its parent (unless under mpirun,
// which stops the job when a rank ends), then runs run_tensor_parallel_follower. Returns the
// exit code.
int run_follower_rank(const EngineArgs& args);

}  // namespace pagoda::cli
