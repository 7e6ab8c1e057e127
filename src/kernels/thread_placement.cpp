#include "kernels/thread_placement.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <set>
#include <utility>

#include "util/error.h"

namespace pagoda {
namespace {

int parse_cpu_number(std::string_view text, const std::string& spec) {
  int value = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0) {
    fail("--cpu-bind '{}': '{}' is not a CPU number (use 'none', 'cores' or a list like 0-3,8)",
         spec, text);
  }
  return value;
}

// "0-3,8" → {0, 1, 2, 3, 8}, in the order written.
std::vector<int> parse_cpu_list(const std::string& spec) {
  std::vector<int> cpus;
  std::string_view rest = spec;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const size_t dash = item.find('-');
    const int first = parse_cpu_number(item.substr(0, dash), spec);
    const int last =
        dash == std::string_view::npos ? first : parse_cpu_number(item.substr(dash + 1), spec);
    if (last < first) fail("--cpu-bind '{}': the range '{}' runs backwards", spec, item);
    for (int cpu = first; cpu <= last; ++cpu) cpus.push_back(cpu);
  }
  if (cpus.empty()) fail("--cpu-bind '{}': no CPUs listed", spec);
  return cpus;
}

// Physical core of `cpu` as (package, core) from sysfs; (-1, cpu) when sysfs does not say, so
// every CPU then counts as its own core.
std::pair<int, int> core_of(int cpu) {
  const std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
  int package = -1, core = -1;
  std::ifstream(base + "physical_package_id") >> package;
  std::ifstream(base + "core_id") >> core;
  if (core < 0) return {-1, cpu};
  return {package, core};
}

}  // namespace

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

std::vector<int> parse_cpu_bind(const std::string& spec) {
  if (spec.empty() || spec == "none") return {};
  const std::vector<int> allowed = allowed_cpus();
  if (spec == "cores") {
    std::vector<int> cpus;
    std::set<std::pair<int, int>> seen;
    for (int cpu : allowed) {
      if (seen.insert(core_of(cpu)).second) cpus.push_back(cpu);
    }
    return cpus;
  }
  std::vector<int> cpus = parse_cpu_list(spec);
  for (int cpu : cpus) {
    if (!std::binary_search(allowed.begin(), allowed.end(), cpu)) {
      fail("--cpu-bind '{}': CPU {} is not one this process may run on ({} allowed)", spec, cpu,
           allowed.size());
    }
  }
  return cpus;
}

void apply_thread_placement(const ThreadPlacement& placement) {
  if (placement.num_threads > 0) omp_set_num_threads(placement.num_threads);
  if (placement.cpus.empty()) return;
  const std::vector<int>& cpus = placement.cpus;
  int failures = 0;
#pragma omp parallel reduction(+ : failures)
  {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpus[static_cast<size_t>(omp_get_thread_num()) % cpus.size()], &set);
    failures += pthread_setaffinity_np(pthread_self(), sizeof(set), &set) != 0;
  }
  if (failures > 0) fail("--cpu-bind: {} threads could not be pinned", failures);
}

}  // namespace pagoda
