// The roofline probe: how fast this machine can stream memory into the cores. Decode is bound
// by reading the weights once per token, so its speed is judged as a fraction of this figure;
// benchmarks measure both in the same run.
#pragma once

#include <cstddef>

namespace pagoda {

struct BandwidthOptions {
  size_t buffer_bytes = size_t{1} << 30;  // well beyond any last-level cache
  int num_threads = 1;
  int repeats = 5;  // the best run is reported: other load on the machine only slows runs down
};

// Read bandwidth in GB/s (1e9 bytes/s): each thread sums its share of a buffer that it touched
// first (so its pages are local on NUMA machines), best of `repeats` full passes. If
// per_cpu_second is given, it receives bytes read per CPU-second of this process (least CPU
// time of any pass): the figure to compare with on a machine that other work shares.
double measure_read_bandwidth_gbps(const BandwidthOptions& options,
                                   double* per_cpu_second = nullptr);

}  // namespace pagoda
