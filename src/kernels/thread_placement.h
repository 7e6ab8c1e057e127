// Where the kernel threads run. OpenMP's threads float between cores by default; pinned, each
// keeps its L1/L2 (a decode step's rows, a prefill panel) and its NUMA node from one step to
// the next, and two threads never share a core's SMT siblings. `--threads` / `--cpu-bind`.
#pragma once

#include <string>
#include <vector>

namespace pagoda {

struct ThreadPlacement {
  int num_threads = 0;    // 0: OpenMP's default (all CPUs of the process)
  std::vector<int> cpus;  // thread i runs on cpus[i]; empty: not pinned
};

// The CPUs for `--cpu-bind SPEC`: "none" or "" (not pinned), "cores" (the first hardware thread
// of each physical core this process may run on, in order), or a list like "0-3,8,10-11". Throws
// pagoda::Error for a malformed list or a CPU outside the process's affinity mask.
std::vector<int> parse_cpu_bind(const std::string& spec);

// The CPUs this process may run on (sched_getaffinity), ascending.
std::vector<int> allowed_cpus();

// Applies `placement` to the OpenMP team of the calling thread: sets the team size, then pins
// thread i of a parallel region to cpus[i] (so the caller itself, thread 0, to cpus[0]). With
// more threads than CPUs, threads share them round-robin. Call it from the thread that runs
// the parallel regions (the engine's), before the first step; libgomp keeps the same pinned
// threads for every later region of that size.
void apply_thread_placement(const ThreadPlacement& placement);

}  // namespace pagoda
