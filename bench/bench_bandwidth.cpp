// The roofline probe on its own: memory read bandwidth with 1 thread and with all threads
// (OMP_NUM_THREADS or every core). Usage: bench_bandwidth [buffer_MiB] [repeats]
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <initializer_list>

#include "kernels/bandwidth.h"

int main(int argc, char** argv) {
  pagoda::BandwidthOptions options;
  if (argc > 1) options.buffer_bytes = static_cast<size_t>(std::atol(argv[1])) << 20;
  if (argc > 2) options.repeats = std::atoi(argv[2]);
  const int all_threads = omp_get_max_threads();
  std::printf("read bandwidth, %zu MiB buffer, best of %d:\n", options.buffer_bytes >> 20,
              options.repeats);
  for (int threads : {1, all_threads}) {
    options.num_threads = threads;
    double per_cpu = 0.0;
    const double gbps = pagoda::measure_read_bandwidth_gbps(options, &per_cpu);
    std::printf("  %2d thread%s: %6.2f GB/s  (%6.2f GB/s per CPU-second)\n", threads,
                threads == 1 ? " " : "s", gbps, per_cpu);
    if (all_threads == 1) break;
  }
  return 0;
}
