// Memory read bandwidth probe (see bandwidth.h). Uses SSE2 loads, the x86-64 baseline, with
// four independent accumulators: enough loads in flight to saturate DRAM from one core.
#include "kernels/bandwidth.h"

#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "util/huge_buffer.h"

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace pagoda {
namespace {

uint64_t read_sum(const uint64_t* data, size_t count) {
#if defined(__x86_64__)
  __m128i a0 = _mm_setzero_si128(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    a0 = _mm_add_epi64(a0, _mm_load_si128(reinterpret_cast<const __m128i*>(data + i)));
    a1 = _mm_add_epi64(a1, _mm_load_si128(reinterpret_cast<const __m128i*>(data + i + 2)));
    a2 = _mm_add_epi64(a2, _mm_load_si128(reinterpret_cast<const __m128i*>(data + i + 4)));
    a3 = _mm_add_epi64(a3, _mm_load_si128(reinterpret_cast<const __m128i*>(data + i + 6)));
  }
  const __m128i s = _mm_add_epi64(_mm_add_epi64(a0, a1), _mm_add_epi64(a2, a3));
  uint64_t lanes[2];
  _mm_storeu_si128(reinterpret_cast<__m128i*>(lanes), s);
  uint64_t sum = lanes[0] + lanes[1];
#else
  uint64_t sum = 0;
  size_t i = 0;
#endif
  for (; i < count; ++i) sum += data[i];
  return sum;
}

double process_cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6;
}

}  // namespace

double measure_read_bandwidth_gbps(const BandwidthOptions& options, double* per_cpu_second) {
  const int num_threads = std::max(1, options.num_threads);
  const size_t count =
      options.buffer_bytes / sizeof(uint64_t) / (8 * num_threads) * (8 * num_threads);
  // 2 MiB-aligned and advised for transparent huge pages, as the weights are (util/huge_buffer.h,
  // --weights-memory): on 4 KiB pages the probe read 34.5 GB/s where decode streamed int8
  // weights at 38, so the roofline has to see the same page size as the weights.
  constexpr size_t kHugePage = size_t{2} << 20;
  const size_t alloc_bytes = (count * sizeof(uint64_t) + kHugePage - 1) & ~(kHugePage - 1);
  auto* data = static_cast<uint64_t*>(std::aligned_alloc(kHugePage, alloc_bytes));
  advise_huge_pages(data, alloc_bytes);
  const size_t per_thread = count / num_threads;
#pragma omp parallel num_threads(num_threads)
  {
    const size_t begin = omp_get_thread_num() * per_thread;
    for (size_t i = begin; i < begin + per_thread; ++i) data[i] = i;  // first touch
  }
  double best_seconds = 1e30, best_cpu_seconds = 1e30;
  volatile uint64_t sink = 0;
  for (int r = 0; r < std::max(1, options.repeats); ++r) {
    uint64_t total = 0;
    const double cpu_start = process_cpu_seconds();
    const auto start = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(num_threads) reduction(+ : total)
    total += read_sum(data + omp_get_thread_num() * per_thread, per_thread);
    const auto stop = std::chrono::steady_clock::now();
    sink = sink + total;
    best_seconds = std::min(best_seconds, std::chrono::duration<double>(stop - start).count());
    best_cpu_seconds = std::min(best_cpu_seconds, process_cpu_seconds() - cpu_start);
  }
  std::free(data);
  const double bytes = static_cast<double>(count * sizeof(uint64_t));
  if (per_cpu_second != nullptr) *per_cpu_second = bytes / best_cpu_seconds / 1e9;
  return bytes / best_seconds / 1e9;
}

}  // namespace pagoda
