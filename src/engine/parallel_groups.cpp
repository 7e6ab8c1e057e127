#include "engine/parallel_groups.h"

#include <chrono>
#include <string>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#if PAGODA_HAVE_MPI
#include "parallel/mpi_communicator.h"
#endif
#include "parallel/shm_communicator.h"
#include "util/error.h"
#include "util/numa.h"

namespace pagoda {
namespace {

std::unique_ptr<CountingCommunicator> join(
    const std::string& job_id, int rank, int world_size, int numa_node = -1,
    std::chrono::microseconds idle_sleep = std::chrono::microseconds(0)) {
  ShmCommunicatorOptions options;
  options.job_id = job_id;
  options.rank = rank;
  options.world_size = world_size;
  // Every rank reads its weights before it attaches: give a slow disk time.
  options.attach_timeout = std::chrono::minutes(10);
  options.numa_node = numa_node;
  options.idle_sleep = idle_sleep;
  return std::make_unique<CountingCommunicator>(std::make_unique<ShmCommunicator>(options));
}

// Either end of a link may wait as long as the other's whole stage of work, so it sleeps while
// it waits rather than take turns on the core with its rank's compute threads; 50 us is
// nothing beside a stage's milliseconds.
constexpr std::chrono::microseconds kLinkIdleSleep{50};

// A two-rank link; the sending end queues its sends (the receiving end needs no sender
// thread).
std::unique_ptr<PairLink> link(const std::string& job_id, int rank, bool sends) {
  return std::make_unique<PairLink>(join(job_id, rank, 2, -1, kLinkIdleSleep),
                                    sends ? PairLink::Mode::kQueued : PairLink::Mode::kBlocking);
}

#if PAGODA_HAVE_MPI
// The same over MPI. The sending end queues when MPI gave the process MPI_THREAD_MULTIPLE (its
// sender thread calls MPI while the engine thread does); otherwise it sends on the caller's
// thread, and the pipeline keeps one batch in flight (the executor asks the links,
// tensor_parallel_executor.h). The sender thread waits in MPI_Test polls, which also move the
// bytes: Open MPI has no progress thread, so non-blocking sends started on the engine thread
// would stall while it computes.
std::unique_ptr<PairLink> mpi_link(std::unique_ptr<MpiCommunicator> pair, bool sends) {
  pair->set_idle_sleep(kLinkIdleSleep);
  const PairLink::Mode mode = sends ? PairLink::sending_mode(*pair) : PairLink::Mode::kBlocking;
  return std::make_unique<PairLink>(std::move(pair), mode);
}
#endif

// The groups of a job launched by mpirun: MPI numbers the ranks, and they must be the ones the
// arguments name. A stage's tensor group and each link are splits of MPI_COMM_WORLD, so they
// run over whatever transport mpirun chose (shared memory on one machine, TCP or UCX between
// machines). Every rank makes every split, in the same order (each is collective over the
// world): the stage groups, then the link after stage 0, 1, ..., then the logits link.
void join_mpi_groups(const EngineArgs& args, ParallelGroups& g) {
#if PAGODA_HAVE_MPI
  auto mpi = std::make_unique<MpiCommunicator>(g.pipeline_size > 1
                                                   ? MpiCommunicator::Threads::kMultiple
                                                   : MpiCommunicator::Threads::kSerialized);
  if (mpi->world_size() != parallel_world_size(args) || mpi->rank() != args.tensor_parallel_rank) {
    fail("parallel: MPI says rank {} of {}, the arguments rank {} of {} ({} x {} stages)",
         mpi->rank(), mpi->world_size(), args.tensor_parallel_rank, parallel_world_size(args),
         args.tensor_parallel_size, args.pipeline_parallel_size);
  }
  const int stage = g.stage();
  const int t = g.tensor_rank();
  if (g.pipeline_size > 1) {
    if (g.tensor_size > 1)
      g.stage_tensor = std::make_unique<CountingCommunicator>(mpi->split(stage, t));
    // Rank t of stage s and rank t of stage s + 1, the sender first.
    for (int s = 0; s + 1 < g.pipeline_size; ++s) {
      const bool member = stage == s || stage == s + 1;
      std::unique_ptr<MpiCommunicator> pair = mpi->split(member ? t : -1, stage);
      if (stage == s) g.to_next = mpi_link(std::move(pair), true);
      if (stage == s + 1) g.from_previous = mpi_link(std::move(pair), false);
    }
    const bool last = stage + 1 == g.pipeline_size;
    const bool logits_end = g.rank == 0 || (last && t == 0);
    std::unique_ptr<MpiCommunicator> pair = mpi->split(logits_end ? 0 : -1, g.rank == 0 ? 0 : 1);
    if (logits_end) g.logits = mpi_link(std::move(pair), g.rank != 0);
    if (!mpi->allows_concurrent_groups() && g.rank == 0) {
      spdlog::warn(
          "parallel: MPI gave this process less than MPI_THREAD_MULTIPLE, so the pipeline's "
          "links send on the engine thread and one batch is in flight at a time");
    }
  }
  spdlog::info("parallel: rank {} of {} over MPI (pipeline stage {} of {}, tensor rank {} of {})",
               g.rank, mpi->world_size(), stage, g.pipeline_size, t, g.tensor_size);
  g.world = std::make_unique<CountingCommunicator>(std::move(mpi));
#else
  (void)args;
  (void)g;
  fail(
      "parallel over MPI: this pagoda was built without MPI (install libopenmpi-dev and "
      "rebuild)");
#endif
}

void add(CommunicationStats& total, const CommunicationStats& s) {
  total.num_calls += s.num_calls;
  total.bytes += s.bytes;
  total.seconds += s.seconds;
}

}  // namespace

int parallel_world_size(const EngineArgs& args) {
  return args.tensor_parallel_size * args.pipeline_parallel_size;
}

TensorParallel ParallelGroups::tensor_parallel() const {
  if (tensor_size == 1) return TensorParallel();
  return TensorParallel(pipeline_size == 1 ? world.get() : stage_tensor.get());
}

PipelineParallel ParallelGroups::pipeline_parallel() const {
  return PipelineParallel(pipeline_size, stage(), from_previous.get(), to_next.get(),
                          rank == 0 ? nullptr : logits.get());
}

CommunicationStats ParallelGroups::stats() const {
  CommunicationStats total;
  for (const CountingCommunicator* c : {world.get(), stage_tensor.get()})
    if (c != nullptr) add(total, c->stats());
  for (const PairLink* l : {from_previous.get(), to_next.get(), logits.get()})
    if (l != nullptr) add(total, l->stats());
  return total;
}

std::unique_ptr<ParallelGroups> join_parallel_groups(const EngineArgs& args) {
  const int world_size = parallel_world_size(args);
  if (args.tensor_parallel_size < 1 || args.pipeline_parallel_size < 1)
    fail("tensor- and pipeline-parallel sizes must be at least 1");
  if (world_size <= 1) return nullptr;
  if (args.tensor_parallel_mpi) {
    auto g = std::make_unique<ParallelGroups>();
    g->tensor_size = args.tensor_parallel_size;
    g->pipeline_size = args.pipeline_parallel_size;
    g->rank = args.tensor_parallel_rank;
    join_mpi_groups(args, *g);
    return g;
  }
  if (world_size > ShmCommunicator::kMaxRanks)
    fail("{} ranks is over the {} one machine takes", world_size, ShmCommunicator::kMaxRanks);
  if (args.tensor_parallel_job_id.empty())
    fail("{} ranks: no job id to find the other ranks by", world_size);
  if (args.tensor_parallel_rank < 0 || args.tensor_parallel_rank >= world_size)
    fail("rank {} is outside a group of {}", args.tensor_parallel_rank, world_size);

  auto g = std::make_unique<ParallelGroups>();
  g->tensor_size = args.tensor_parallel_size;
  g->pipeline_size = args.pipeline_parallel_size;
  g->rank = args.tensor_parallel_rank;
  const std::string& id = args.tensor_parallel_job_id;
  // One rank per NUMA node when the machine has several (ranks beyond the node count wrap).
  const int num_nodes = numa_node_count();
  const int numa_node = num_nodes > 1 ? g->rank % num_nodes : -1;
  g->world = join(id, g->rank, world_size, numa_node);
  const int stage = g->stage();
  const int t = g->tensor_rank();
  if (g->pipeline_size > 1) {
    if (g->tensor_size > 1)
      g->stage_tensor = join(fmt::format("{}.tp{}", id, stage), t, g->tensor_size);
    if (stage > 0) g->from_previous = link(fmt::format("{}.pp{}.{}", id, stage - 1, t), 1, false);
    if (stage + 1 < g->pipeline_size)
      g->to_next = link(fmt::format("{}.pp{}.{}", id, stage, t), 0, true);
    const bool last = stage + 1 == g->pipeline_size;
    if (g->rank == 0 || (last && t == 0)) {
      const bool sends = g->rank != 0;
      g->logits = link(id + ".logits", sends ? 1 : 0, sends);
    }
  }
  spdlog::info("parallel: rank {} of {} (pipeline stage {} of {}, tensor rank {} of {}){}", g->rank,
               world_size, stage, g->pipeline_size, t, g->tensor_size,
               numa_node >= 0 ? fmt::format(", on NUMA node {}", numa_node) : "");
  return g;
}

}  // namespace pagoda
