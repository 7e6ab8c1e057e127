// The communicators one rank of a TP x PP job joins (docs/parallel.md). Ranks are numbered
// stage-major: rank g is tensor-parallel rank g % TP of pipeline stage g / TP, so rank 0 is the
// first stage's first rank, which schedules and samples.
//   world       every rank: rank 0 broadcasts each step's commands and the sampled ids
//   tensor      the ranks of one stage: its layers' all-reduces and gathers (the world itself
//               when there is one stage; none with TP 1)
//   links       rank t of stage s to rank t of stage s + 1: the hidden states, one way
//   logits      the last stage's rank 0 to rank 0: the logits rows to sample
// Links queue their sends, so a stage never waits for the next one to take its output and
// several micro-batches can be in flight (tensor_parallel_executor.h); over MPI only when MPI
// gives MPI_THREAD_MULTIPLE (a pipeline asks for it), else one batch is in flight.
// On one machine every group is a shared-memory segment named after the job id; every rank
// joins its groups in the same order (world, tensor, link from the previous stage, link to the
// next, logits), so no two ranks wait on each other's second group before their first. Under
// mpirun the world is MPI_COMM_WORLD and the other groups are splits of it.
#pragma once

#include <memory>

#include "model/pipeline_parallel.h"
#include "model/tensor_parallel.h"
#include "pagoda/engine.h"
#include "parallel/counting_communicator.h"
#include "parallel/pair_link.h"

namespace pagoda {

struct ParallelGroups {
  int tensor_size = 1;
  int pipeline_size = 1;
  int rank = 0;  // in the world

  std::unique_ptr<CountingCommunicator> world;
  std::unique_ptr<CountingCommunicator> stage_tensor;  // when there are several stages and TP > 1
  // Queued sends (parallel/pair_link.h); they count their own traffic.
  std::unique_ptr<PairLink> from_previous, to_next, logits;

  int stage() const { return rank / tensor_size; }
  int tensor_rank() const { return rank % tensor_size; }
  // What the model is loaded with. Its logits link is the last stage's sending end only: rank 0
  // receives the logits in its executor, when the engine asks for that batch's output.
  TensorParallel tensor_parallel() const;
  PipelineParallel pipeline_parallel() const;
  // Everything this rank sent and received, over every group.
  CommunicationStats stats() const;
};

// The world size args ask for: tensor-parallel size x pipeline-parallel size.
int parallel_world_size(const EngineArgs& args);

// Joins args' rank's groups; nullptr when the world is one process. Throws Error when the sizes
// are out of range or a rank does not attach in time.
std::unique_ptr<ParallelGroups> join_parallel_groups(const EngineArgs& args);

}  // namespace pagoda
