// --cpu-bind: the spec parser, and that every thread of a parallel region really runs on the
// CPU it was given.
#include "kernels/thread_placement.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <set>
#include <thread>
#include <vector>

#include "util/error.h"

namespace pagoda {
namespace {

std::string error_of(const std::string& spec) {
  try {
    parse_cpu_bind(spec);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ThreadPlacement, ParsesListsCoresAndNone) {
  const std::vector<int> allowed = allowed_cpus();
  ASSERT_FALSE(allowed.empty());
  EXPECT_TRUE(parse_cpu_bind("none").empty());
  EXPECT_TRUE(parse_cpu_bind("").empty());
  const std::vector<int> cores = parse_cpu_bind("cores");
  ASSERT_FALSE(cores.empty());
  EXPECT_LE(cores.size(), allowed.size());
  EXPECT_TRUE(std::is_sorted(cores.begin(), cores.end()));
  EXPECT_EQ(cores.front(), allowed.front());
  // A list in the order written, ranges expanded.
  const int a = allowed.front(), b = allowed.back();
  EXPECT_EQ(parse_cpu_bind(std::to_string(b) + "," + std::to_string(a)), (std::vector<int>{b, a}));
  if (allowed.size() >= 2 && allowed[1] == a + 1) {
    EXPECT_EQ(parse_cpu_bind(std::to_string(a) + "-" + std::to_string(a + 1)),
              (std::vector<int>{a, a + 1}));
  }
  for (const char* bad : {"x", "1-", "-1", "3-1", ",", "0,,1", "1.5", "cores2"}) {
    EXPECT_NE(error_of(bad).find("--cpu-bind"), std::string::npos) << bad;
  }
  EXPECT_NE(error_of("100000").find("not one this process may run on"), std::string::npos);
}

TEST(ThreadPlacement, PinsEveryThreadOfTheTeamToItsCpu) {
  const std::vector<int> allowed = allowed_cpus();
  const int num_threads = static_cast<int>(std::min<size_t>(allowed.size(), 4));
  // On a thread of its own: pinning the test's main thread would outlive the test.
  std::vector<std::vector<int>> seen(static_cast<size_t>(num_threads));
  std::thread runner([&] {
    ThreadPlacement placement;
    placement.num_threads = num_threads;
    placement.cpus.assign(allowed.rbegin(), allowed.rbegin() + num_threads);  // reversed
    apply_thread_placement(placement);
#pragma omp parallel
    {
      cpu_set_t set;
      CPU_ZERO(&set);
      sched_getaffinity(0, sizeof(set), &set);
      std::vector<int> cpus;
      for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
        if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
      }
      seen[static_cast<size_t>(omp_get_thread_num())] = cpus;
    }
  });
  runner.join();
  for (int t = 0; t < num_threads; ++t) {
    EXPECT_EQ(seen[static_cast<size_t>(t)],
              std::vector<int>{allowed[allowed.size() - 1 - static_cast<size_t>(t)]})
        << "thread " << t;
  }
}

}  // namespace
}  // namespace pagoda
