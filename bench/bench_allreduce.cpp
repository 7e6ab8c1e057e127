// All-reduce over the shared-memory communicator, against memcpy on the same machine in the same
// run. Forks N ranks (one per NUMA node in production; here wherever the scheduler puts them)
// and sums fp32 (or bf16) buffers from 4 KiB up. Reports per size:
//   algbw  = buffer bytes / time                       (what a layer waits for)
//   busbw  = algbw * 2 (N - 1) / N                      (bytes each rank moves, NCCL's convention,
//                                                        comparable across rank counts)
//   memcpy = one-thread memcpy of the same buffer, GB/s (the copy bandwidth a rank has)
// and busbw / memcpy: reduce-scatter + all-gather copies each byte in, reads it once to sum and
// copies it out, so a ratio near 1/2 means the communicator runs at the machine's copy speed.
// With --mpi, under `mpirun -np N bench_allreduce --mpi`, the ranks are MPI processes instead
// (MpiCommunicator; across machines, or network namespaces, what the network gives): the small
// sizes then measure the per-collective latency and the large ones the bandwidth that
// docs/parallel.md's model takes (scripts/measure_parallel.sh runs both).
// Usage: bench_allreduce [--ranks N] [--min-bytes B] [--max-mib M] [--bf16] [--iters K] [--mpi]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "parallel/shm_communicator.h"
#if PAGODA_HAVE_MPI
#include "parallel/mpi_communicator.h"
#endif

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int ranks = 2;
  size_t min_bytes = 4096;
  size_t max_bytes = size_t{64} << 20;
  bool bf16 = false;
  int iters = 20;  // timed calls per size (fewer for the largest sizes, at least 3)
  bool mpi = false;
};

int iterations_for(const Options& options, size_t bytes) {
  return std::max(3,
                  static_cast<int>(std::min<size_t>(options.iters, (size_t{256} << 20) / bytes)));
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Best-of-iterations memcpy bandwidth for `bytes`, in GB/s.
double memcpy_gbps(size_t bytes, int iters) {
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  double best = 1e30;
  for (int i = 0; i < iters + 1; ++i) {
    const Clock::time_point start = Clock::now();
    std::memcpy(dst.data(), src.data(), bytes);
    const double s = seconds_since(start);
    if (i > 0) best = std::min(best, s);  // the first call faults the pages in
  }
  if (dst[bytes / 2] != 1) std::abort();  // keeps the copy
  return static_cast<double>(bytes) / best / 1e9;
}

// The memcpy bandwidth of every size the ranks will sum.
std::vector<double> memcpy_by_size(const Options& options) {
  std::vector<double> gbps;
  for (size_t bytes = options.min_bytes; bytes <= options.max_bytes; bytes *= 4) {
    gbps.push_back(memcpy_gbps(bytes, iterations_for(options, bytes)));
  }
  return gbps;
}

void run_rank(const Options& options, pagoda::Communicator& comm, const std::string& transport,
              const std::vector<double>& memcpy_by_size) {
  const int rank = comm.rank();
  const pagoda::DType dtype = options.bf16 ? pagoda::DType::kBF16 : pagoda::DType::kF32;
  const size_t element_bytes = options.bf16 ? 2 : 4;
  std::vector<char> buffer(options.max_bytes, 0);
  if (rank == 0) {
    std::printf("%d ranks, %s, %s\n", options.ranks, options.bf16 ? "bf16" : "fp32",
                transport.c_str());
    std::printf("%12s %10s %10s %10s %10s %8s\n", "bytes", "time_us", "algbw", "busbw", "memcpy",
                "bus/cpy");
  }
  size_t index = 0;
  for (size_t bytes = options.min_bytes; bytes <= options.max_bytes; bytes *= 4, ++index) {
    const size_t count = bytes / element_bytes;
    const int iters = iterations_for(options, bytes);
    comm.all_reduce_sum(buffer.data(), count, dtype);  // warm-up: faults pages, fills caches
    double best = 1e30;
    for (int i = 0; i < iters; ++i) {
      comm.barrier();  // start together, so the time is the collective's, not a straggler's
      const Clock::time_point start = Clock::now();
      comm.all_reduce_sum(buffer.data(), count, dtype);
      best = std::min(best, seconds_since(start));
    }
    if (rank == 0) {
      const double algbw = static_cast<double>(bytes) / best / 1e9;
      const double busbw = algbw * 2.0 * (options.ranks - 1) / options.ranks;
      const double copy = memcpy_by_size[index];
      std::printf("%12zu %10.1f %10.2f %10.2f %10.2f %8.2f\n", bytes, best * 1e6, algbw, busbw,
                  copy, busbw / copy);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--ranks" && i + 1 < argc) {
      options.ranks = std::atoi(argv[++i]);
    } else if (arg == "--min-bytes" && i + 1 < argc) {
      options.min_bytes = static_cast<size_t>(std::atol(argv[++i]));
    } else if (arg == "--mpi") {
      options.mpi = true;
    } else if (arg == "--max-mib" && i + 1 < argc) {
      options.max_bytes = static_cast<size_t>(std::atol(argv[++i])) << 20;
    } else if (arg == "--iters" && i + 1 < argc) {
      options.iters = std::atoi(argv[++i]);
    } else if (arg == "--bf16") {
      options.bf16 = true;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--ranks N] [--min-bytes B] [--max-mib M] [--bf16] [--iters K] "
                   "[--mpi]\n",
                   argv[0]);
      return 2;
    }
  }
  if (options.min_bytes < 4 || options.min_bytes % 4 != 0 ||
      options.max_bytes < options.min_bytes) {
    std::fprintf(stderr, "need --min-bytes a multiple of 4, at most --max-mib\n");
    return 2;
  }
  if (options.mpi) {
#if PAGODA_HAVE_MPI
    try {
      pagoda::MpiCommunicator comm;
      options.ranks = comm.world_size();
      if (options.ranks < 2) {
        std::fprintf(stderr, "--mpi: run under mpirun -np N with N >= 2\n");
        return 2;
      }
      // memcpy first, each rank after the previous one, so they never compete for the bus.
      std::vector<double> copy;
      for (int r = 0; r < options.ranks; ++r) {
        if (r == comm.rank()) copy = memcpy_by_size(options);
        comm.barrier();
      }
      run_rank(options, comm, "MPI", copy);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 1;
    }
    return 0;
#else
    std::fprintf(stderr, "--mpi: this build has no MPI (libopenmpi-dev)\n");
    return 2;
#endif
  }
  if (options.ranks < 2) {
    std::fprintf(stderr, "need --ranks >= 2\n");
    return 2;
  }
  // memcpy first, before any rank runs, so the two never compete for the memory bus.
  const std::vector<double> copy = memcpy_by_size(options);
  const std::string job_id = "bench-allreduce-" + std::to_string(getpid());
  std::vector<pid_t> children;
  for (int rank = 0; rank < options.ranks; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      try {
        pagoda::ShmCommunicatorOptions comm_options;
        comm_options.job_id = job_id;
        comm_options.rank = rank;
        comm_options.world_size = options.ranks;
        pagoda::ShmCommunicator comm(comm_options);
        run_rank(options, comm,
                 "shared memory, slot " + std::to_string(comm_options.slot_bytes >> 10) +
                     " KiB per rank",
                 copy);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
        _exit(1);
      }
      std::fflush(stdout);
      _exit(0);
    }
    children.push_back(pid);
  }
  int failures = 0;
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
  }
  return failures == 0 ? 0 : 1;
}
