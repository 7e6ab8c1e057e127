// The shared-memory communicator in forked processes, one per rank: every collective against the
// scalar reference (tests/parallel/reference.h) for world sizes 1, 2 and 4, sizes that do not
// divide by the world size and that go through the slots in several pieces, many calls in a row
// (barrier and slot-half reuse), the segment's cleanup, and a rank dying mid-run; and the
// pipeline's PairLink over it (queued sends, a dead receiver).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "pagoda/error.h"
#include "parallel/pair_link.h"
#include "parallel/reference.h"
#include "parallel/shm_communicator.h"

namespace pagoda {
namespace {

using RankBody = std::function<std::string(ShmCommunicator&)>;

std::string unique_job_id() {
  static std::atomic<int> counter{0};
  return fmt::format("test-{}-{}", getpid(), counter++);
}

// Forks world_size processes, rank r running body on its communicator; returns the ranks'
// complaints (empty when every rank returned "" and exited cleanly). A body reports through a
// pipe; a rank that hangs past the timeout is killed and reported.
std::string run_ranks(int world_size, const RankBody& body, size_t slot_bytes = 16384,
                      std::string job_id = unique_job_id()) {
  std::vector<pid_t> pids;
  std::vector<int> pipes;
  for (int r = 0; r < world_size; ++r) {
    int fds[2];
    if (pipe(fds) != 0) return "pipe failed";
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      std::string complaint;
      try {
        ShmCommunicatorOptions options;
        options.job_id = job_id;
        options.rank = r;
        options.world_size = world_size;
        options.slot_bytes = slot_bytes;
        options.attach_timeout = std::chrono::seconds(20);
        ShmCommunicator comm(options);
        complaint = body(comm);
      } catch (const std::exception& e) {
        complaint = std::string("threw: ") + e.what();
      }
      if (!complaint.empty()) {
        complaint = fmt::format("rank {}: {}\n", r, complaint);
        (void)!write(fds[1], complaint.data(), complaint.size());
      }
      _exit(complaint.empty() ? 0 : 1);
    }
    close(fds[1]);
    pids.push_back(pid);
    pipes.push_back(fds[0]);
  }
  std::string complaints;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (int r = 0; r < world_size; ++r) {
    int status = 0;
    while (waitpid(pids[r], &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        for (pid_t pid : pids) kill(pid, SIGKILL);
        waitpid(pids[r], &status, 0);
        complaints += fmt::format("rank {} timed out\n", r);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    char buffer[4096];
    ssize_t n;
    while ((n = read(pipes[r], buffer, sizeof buffer)) > 0) complaints.append(buffer, n);
    close(pipes[r]);
  }
  return complaints;
}

std::string check_all_reduce(Communicator& comm, uint64_t seed, size_t count, DType dtype) {
  std::vector<uint8_t> data = test::pack(test::rank_input(seed, comm.rank(), count, dtype), dtype);
  comm.all_reduce_sum(data.data(), count, dtype);
  const std::vector<uint8_t> expected =
      test::pack(test::reference_sum(seed, comm.world_size(), count, dtype), dtype);
  if (data == expected) return "";
  const size_t element_bytes = static_cast<size_t>(dtype_size(dtype));
  for (size_t i = 0; i < count; ++i) {
    if (std::memcmp(&data[i * element_bytes], &expected[i * element_bytes], element_bytes) != 0) {
      return fmt::format("all_reduce_sum {} of {}: element {} differs from the reference",
                         dtype_name(dtype), count, i);
    }
  }
  return "";
}

std::string check_all_gather(Communicator& comm, uint64_t seed, size_t bytes) {
  const std::vector<uint8_t> send = test::gather_input(seed, comm.rank(), bytes);
  std::vector<uint8_t> recv(bytes * static_cast<size_t>(comm.world_size()), 0xAB);
  comm.all_gather(send.data(), recv.data(), bytes);
  for (int r = 0; r < comm.world_size(); ++r) {
    const std::vector<uint8_t> expected = test::gather_input(seed, r, bytes);
    if (bytes > 0 && std::memcmp(&recv[r * bytes], expected.data(), bytes) != 0) {
      return fmt::format("all_gather of {} bytes: rank {}'s part differs", bytes, r);
    }
  }
  return "";
}

std::string check_broadcast(Communicator& comm, uint64_t seed, size_t bytes, int root) {
  std::vector<uint8_t> data = test::gather_input(seed, comm.rank(), bytes);
  comm.broadcast(data.data(), bytes, root);
  if (data != test::gather_input(seed, root, bytes)) {
    return fmt::format("broadcast of {} bytes from {} differs", bytes, root);
  }
  return "";
}

class ShmWorld : public ::testing::TestWithParam<int> {};

// Counts chosen around the slot of 16 KiB (two 8 KiB halves: 2048 fp32 or 4096 16-bit values
// per piece): one element, fewer elements than ranks, not divisible by the world size, exactly
// a piece, several pieces with a ragged end.
TEST_P(ShmWorld, AllReduceMatchesScalarReference) {
  const std::string complaints = run_ranks(GetParam(), [](ShmCommunicator& comm) {
    uint64_t seed = 1;
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (size_t count : {size_t{1}, size_t{3}, size_t{17}, size_t{1001}, size_t{2048},
                           size_t{4096}, size_t{12345}}) {
        const std::string complaint = check_all_reduce(comm, seed++, count, dtype);
        if (!complaint.empty()) return complaint;
      }
    }
    return std::string();
  });
  EXPECT_EQ(complaints, "");
}

TEST_P(ShmWorld, AllGatherMatchesEveryRanksInput) {
  const std::string complaints = run_ranks(GetParam(), [](ShmCommunicator& comm) {
    uint64_t seed = 100;
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{7}, size_t{8192}, size_t{20001}}) {
      const std::string complaint = check_all_gather(comm, seed++, bytes);
      if (!complaint.empty()) return complaint;
    }
    return std::string();
  });
  EXPECT_EQ(complaints, "");
}

TEST_P(ShmWorld, BroadcastFromEveryRoot) {
  const std::string complaints = run_ranks(GetParam(), [](ShmCommunicator& comm) {
    uint64_t seed = 200;
    for (int root = 0; root < comm.world_size(); ++root) {
      for (size_t bytes : {size_t{1}, size_t{513}, size_t{30000}}) {
        const std::string complaint = check_broadcast(comm, seed++, bytes, root);
        if (!complaint.empty()) return complaint;
      }
    }
    return std::string();
  });
  EXPECT_EQ(complaints, "");
}

// Hundreds of collectives back to back, of mixed kinds and sizes: a barrier or slot half reused
// too early shows up as a wrong sum or a hang.
TEST_P(ShmWorld, ManyCollectivesInARow) {
  const std::string complaints = run_ranks(GetParam(), [](ShmCommunicator& comm) {
    for (uint64_t step = 0; step < 300; ++step) {
      const size_t size = 1 + (step * 7919) % 5000;
      std::string complaint;
      switch (step % 4) {
        case 0:
          complaint = check_all_reduce(comm, step, size, DType::kF32);
          break;
        case 1:
          complaint = check_all_gather(comm, step, size);
          break;
        case 2:
          complaint = check_broadcast(comm, step, size, static_cast<int>(step % comm.world_size()));
          break;
        default:
          comm.barrier();
          complaint = check_all_reduce(comm, step, size, DType::kBF16);
      }
      if (!complaint.empty()) return fmt::format("step {}: {}", step, complaint);
    }
    return std::string();
  });
  EXPECT_EQ(complaints, "");
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ShmWorld, ::testing::Values(1, 2, 4));

TEST(ShmCommunicator, SegmentNameIsGoneOnceEveryRankAttached) {
  const std::string job_id = unique_job_id();
  const std::string path = "/dev/shm" + ShmCommunicator::segment_name(job_id);
  const std::string complaints = run_ranks(
      3,
      [&](ShmCommunicator& comm) {
        if (access(path.c_str(), F_OK) == 0) return path + " still exists after attaching";
        comm.barrier();  // the mapping stays usable after the unlink
        return std::string();
      },
      16384, job_id);
  EXPECT_EQ(complaints, "");
  EXPECT_NE(access(path.c_str(), F_OK), 0) << path;
}

TEST(ShmCommunicator, RankDyingMidRunStopsTheOthersWithAnError) {
  const std::string complaints = run_ranks(2, [](ShmCommunicator& comm) {
    if (comm.rank() == 1) _exit(0);  // leaves without a word, like a crashed rank
    try {
      comm.barrier();
    } catch (const Error& e) {
      if (std::string(e.what()).find("rank 1") == std::string::npos) {
        return std::string("error does not name rank 1: ") + e.what();
      }
      try {
        comm.barrier();
      } catch (const Error&) {
        return std::string();  // and the group stays failed
      }
      return std::string("a second barrier after the failure returned");
    }
    return std::string("barrier returned with rank 1 gone");
  });
  EXPECT_EQ(complaints, "");
}

// A pipeline link over its own two-rank segment (job_id), rank 0 sending.
std::unique_ptr<PairLink> open_link(const std::string& job_id, int rank) {
  ShmCommunicatorOptions options;
  options.job_id = job_id;
  options.rank = rank;
  options.world_size = 2;
  options.slot_bytes = 16384;
  options.attach_timeout = std::chrono::seconds(20);
  return std::make_unique<PairLink>(
      std::make_unique<ShmCommunicator>(options),
      rank == 0 ? PairLink::Mode::kQueued : PairLink::Mode::kBlocking);
}

std::vector<uint8_t> message(size_t bytes, int seed) {
  std::vector<uint8_t> m(bytes);
  for (size_t i = 0; i < bytes; ++i)
    m[i] = static_cast<uint8_t>(i * 31 + static_cast<size_t>(seed));
  return m;
}

// A queued send returns before the receiver has taken anything: rank 0 sends three messages
// (one of several slot pieces) and only then meets rank 1 at a barrier of another group, after
// which rank 1 receives them, in order and whole. With sends that wait for the receiver, the
// two ranks would wait on each other until the run times out.
TEST(PairLink, QueuedSendsDoNotWaitForTheReceiver) {
  const std::string link_id = unique_job_id();
  const std::vector<size_t> sizes = {1000, 50000, 8};
  const std::string complaints = run_ranks(2, [&](ShmCommunicator& comm) {
    std::unique_ptr<PairLink> link = open_link(link_id, comm.rank());
    if (comm.rank() == 0) {
      for (size_t i = 0; i < sizes.size(); ++i) {
        const std::vector<uint8_t> m = message(sizes[i], static_cast<int>(i));
        link->send(m.data(), m.size());
      }
      comm.barrier();
      link->flush();
      return std::string();
    }
    comm.barrier();
    for (size_t i = 0; i < sizes.size(); ++i) {
      std::vector<uint8_t> got(sizes[i]);
      link->receive(got.data(), got.size());
      if (got != message(sizes[i], static_cast<int>(i)))
        return fmt::format("message {} of {} bytes arrived changed", i, sizes[i]);
    }
    return std::string();
  });
  EXPECT_EQ(complaints, "");
}

// The receiver gone: the queued send fails in the sender thread, and flush and every later send
// report it instead of waiting forever.
TEST(PairLink, ASendToADeadRankFails) {
  const std::string link_id = unique_job_id();
  const std::string complaints = run_ranks(2, [&](ShmCommunicator& comm) {
    std::unique_ptr<PairLink> link = open_link(link_id, comm.rank());
    if (comm.rank() == 1) _exit(0);
    const std::vector<uint8_t> m = message(100, 0);
    link->send(m.data(), m.size());
    try {
      link->flush();
    } catch (const Error& e) {
      if (std::string(e.what()).find("exited") == std::string::npos)
        return std::string("error does not say the rank exited: ") + e.what();
      try {
        link->send(m.data(), m.size());
      } catch (const Error&) {
        return std::string();
      }
      return std::string("a send after the failure was queued");
    }
    return std::string("flush returned with the receiver gone");
  });
  EXPECT_EQ(complaints, "");
}

// Ranks as separate programs, started one after another: they find each other by the job id alone.
TEST(ShmCommunicator, SeparatelyLaunchedRanksFormAGroup) {
  const std::string job_id = unique_job_id();
  constexpr int kWorldSize = 3;
  std::vector<pid_t> pids;
  for (int r = kWorldSize - 1; r >= 0; --r) {  // rank 0 last: the others wait for its segment
    const std::string rank = std::to_string(r), world = std::to_string(kWorldSize);
    const char* argv[] = {PAGODA_SHM_RANK_BIN, job_id.c_str(), rank.c_str(),
                          world.c_str(),       "10007",        nullptr};
    pid_t pid = 0;
    ASSERT_EQ(posix_spawn(&pid, PAGODA_SHM_RANK_BIN, nullptr, nullptr,
                          const_cast<char* const*>(argv), environ),
              0);
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
  EXPECT_NE(access(("/dev/shm" + ShmCommunicator::segment_name(job_id)).c_str(), F_OK), 0);
}

TEST(ShmCommunicator, TakenNameIsRefused) {
  const std::string job_id = unique_job_id();
  const std::string name = ShmCommunicator::segment_name(job_id);
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  close(fd);
  ShmCommunicatorOptions options;
  options.job_id = job_id;
  try {
    ShmCommunicator comm(options);
    ADD_FAILURE() << "a taken name was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exists"), std::string::npos) << e.what();
  }
  shm_unlink(name.c_str());
}

TEST(ShmCommunicator, RejectsBadOptions) {
  ShmCommunicatorOptions options;
  options.job_id = "bad/name";
  EXPECT_THROW(ShmCommunicator{options}, Error);
  options.job_id = unique_job_id();
  options.rank = 2;
  options.world_size = 2;
  EXPECT_THROW(ShmCommunicator{options}, Error);
}

}  // namespace
}  // namespace pagoda
