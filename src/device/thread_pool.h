// The host threads a device's work is split over. On the CPU device they are the OpenMP team
// (sized by --threads and placed by --cpu-bind before the engine runs), so a loop here is the
// same fork/join as a `#pragma omp parallel for` written in place, inlined at the call site:
// no std::function, no allocation. Model code calls this instead of OpenMP, so the threading
// is one decision in one file.
#pragma once

#include <omp.h>

#include <cstdint>

namespace pagoda {

class ThreadPool {
 public:
  // Threads a parallel_for would use now: 1 inside another parallel region (nested loops run
  // on the calling thread).
  int num_threads() const { return omp_in_parallel() ? 1 : omp_get_max_threads(); }

  // body(i) for i in [0, n), iterations split into one contiguous share per thread. Runs on the
  // calling thread alone when n <= serial_up_to (too little work to pay for the fork/join).
  template <typename Body>
  void parallel_for(int64_t n, Body&& body, int64_t serial_up_to = 0) const {
#pragma omp parallel for schedule(static) if (n > serial_up_to)
    for (int64_t i = 0; i < n; ++i) body(i);
  }

  // body(i) for i in [0, n), handed out `chunk` at a time to whichever thread is free: for
  // iterations of uneven cost.
  template <typename Body>
  void parallel_for_dynamic(int64_t n, int64_t chunk, Body&& body) const {
#pragma omp parallel for schedule(dynamic, chunk)
    for (int64_t i = 0; i < n; ++i) body(i);
  }
};

}  // namespace pagoda
