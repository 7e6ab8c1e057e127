#include "tools/pagoda/tensor_parallel_launch.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "util/error.h"

extern char** environ;

namespace pagoda::cli {
namespace {

// This process's own arguments, as the kernel holds them (argv[0] included).
std::vector<std::string> own_arguments() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (size_t begin = 0; begin < all.size();) {
    const size_t end = all.find('\0', begin);
    args.push_back(all.substr(begin, end - begin));
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  if (args.empty()) fail("tensor parallel: cannot read /proc/self/cmdline to start the ranks");
  return args;
}

// Waits for pid until the deadline; true when it was reaped.
bool reap_before(pid_t pid, std::chrono::steady_clock::time_point deadline, int& status) {
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid || r < 0) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// An integer environment variable, or -1 when unset or not a number.
int environment_int(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return -1;
  char* end = nullptr;
  const long n = std::strtol(value, &end, 10);
  return *end == '\0' && n >= 0 && n <= INT_MAX ? static_cast<int>(n) : -1;
}

}  // namespace

void adopt_mpi_rank(EngineArgs& args) {
  int size = environment_int("OMPI_COMM_WORLD_SIZE");
  int rank = environment_int("OMPI_COMM_WORLD_RANK");
  if (size < 0 || rank < 0) {
    size = environment_int("PMI_SIZE");
    rank = environment_int("PMI_RANK");
  }
  if (size <= 1 || rank < 0) return;
  if (args.pipeline_parallel_size > 1 &&
      size != args.tensor_parallel_size * args.pipeline_parallel_size) {
    fail(
        "started as {} MPI processes, but --tensor-parallel-size {} x --pipeline-parallel-size {} "
        "is {}: run mpirun -np T*P",
        size, args.tensor_parallel_size, args.pipeline_parallel_size,
        args.tensor_parallel_size * args.pipeline_parallel_size);
  }
  if (args.pipeline_parallel_size == 1 && size != args.tensor_parallel_size) {
    fail(
        "started as {} MPI processes, but --tensor-parallel-size is {}: run mpirun -np N with "
        "--tensor-parallel-size N",
        size, args.tensor_parallel_size);
  }
  if (!args.tensor_parallel_job_id.empty() || args.tensor_parallel_rank != 0)
    fail("under mpirun, MPI numbers the ranks: no --tensor-parallel-rank or -job-id");
  args.tensor_parallel_mpi = true;
  args.tensor_parallel_rank = rank;
}

void add_tensor_parallel_options(CLI::App* app, EngineArgs& a) {
  app->add_option("--tensor-parallel-size", a.tensor_parallel_size,
                  "Ranks to split Llama/Qwen2 models over (vLLM's -tp): on this machine one "
                  "process per rank, bound one per NUMA node; under mpirun, the MPI world")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app->add_option("--pipeline-parallel-size", a.pipeline_parallel_size,
                  "Pipeline stages to split Llama/Qwen2 layers over on this machine (vLLM's -pp), "
                  "each of --tensor-parallel-size ranks")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  // Set by rank 0 on the ranks it starts; hidden from --help.
  app->add_option("--tensor-parallel-rank", a.tensor_parallel_rank)->group("");
  app->add_option("--tensor-parallel-job-id", a.tensor_parallel_job_id)->group("");
}

FollowerRanks::FollowerRanks(EngineArgs& args) {
  const int world_size = args.tensor_parallel_size * args.pipeline_parallel_size;
  if (world_size <= 1 || args.tensor_parallel_rank != 0 || args.tensor_parallel_mpi) return;
  args.tensor_parallel_job_id =
      fmt::format("pagoda-tp-{}-{}", getpid(),
                  std::chrono::steady_clock::now().time_since_epoch().count() % 1000000000);
  const std::vector<std::string> own = own_arguments();
  // Followers print nothing on stdout (it carries rank 0's output); their logs go to stderr.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  for (int rank = 1; rank < world_size; ++rank) {
    std::vector<std::string> argv = own;
    argv.insert(argv.end(), {"--tensor-parallel-rank", std::to_string(rank),
                             "--tensor-parallel-job-id", args.tensor_parallel_job_id});
    std::vector<char*> c_argv;
    for (std::string& s : argv) c_argv.push_back(s.data());
    c_argv.push_back(nullptr);
    pid_t pid = 0;
    const int err = posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, c_argv.data(), environ);
    if (err != 0) {
      posix_spawn_file_actions_destroy(&actions);
      for (pid_t p : pids_) kill(p, SIGTERM);
      fail("tensor parallel: cannot start rank {}: {}", rank, std::strerror(err));
    }
    pids_.push_back(pid);
  }
  posix_spawn_file_actions_destroy(&actions);
  spdlog::info("parallel: started ranks 1-{} (job {})", world_size - 1,
               args.tensor_parallel_job_id);
}

FollowerRanks::~FollowerRanks() {
  if (pids_.empty()) return;
  // The engine failed (a rank died, a shard did not load): the others stop now. Otherwise they
  // got the shutdown command and are on their way out.
  if (std::uncaught_exceptions() > 0) {
    for (pid_t pid : pids_) kill(pid, SIGTERM);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (size_t i = 0; i < pids_.size(); ++i) {
    int status = 0;
    if (!reap_before(pids_[i], deadline, status)) {
      spdlog::warn("tensor parallel: rank {} did not stop; killing it", i + 1);
      kill(pids_[i], SIGKILL);
      waitpid(pids_[i], &status, 0);
    }
  }
}

int run_follower_rank(const EngineArgs& args) {
  if (args.tensor_parallel_mpi) {
    // mpirun gathers every rank's stdout into its own, which carries rank 0's output alone.
    if (std::freopen("/dev/null", "w", stdout) == nullptr)
      spdlog::warn("tensor parallel: cannot silence rank {}'s stdout", args.tensor_parallel_rank);
  } else {
    // Rank 0 gone before the group formed: nothing would tell this rank, so die with it.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() == 1) return 1;
  }
  run_tensor_parallel_follower(args);
  return 0;
}

}  // namespace pagoda::cli
