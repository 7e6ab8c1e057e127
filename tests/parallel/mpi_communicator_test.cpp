// The MPI communicator, run under mpirun by run_mpi_test.sh with 2 and 3 ranks (3: sizes never
// divide evenly). Every rank runs every test; mpirun fails if any rank does. Inputs have few
// fraction bits, so the reference sum is exact whatever order MPI sums in, and results are
// compared bit for bit (tests/parallel/reference.h). Each collective is checked on the world as
// made (MPI's blocking calls) and on a copy of it whose collectives are polled non-blocking
// calls (set_idle_sleep, as the pipeline's links wait).
//   parallel_mpi_test [--threads=serialized|multiple]   (default multiple, as a pipeline asks)
// With serialized, the pipeline-link tests check the fallback: links that send on the caller's
// thread.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "pagoda/error.h"
#include "parallel/mpi_communicator.h"
#include "parallel/pair_link.h"
#include "parallel/reference.h"

namespace pagoda {
namespace {

MpiCommunicator* comm = nullptr;    // one per process, made in main() before the tests
MpiCommunicator* polled = nullptr;  // every rank of comm, its collectives polled
bool asked_multiple = true;         // main() asked MPI for MPI_THREAD_MULTIPLE
constexpr int kFractionBits = 4;
constexpr std::chrono::microseconds kIdleSleep{50};

// The world, then its polled copy.
std::vector<MpiCommunicator*> worlds() {
  return {comm, polled};
}
const char* kind(const MpiCommunicator* c) {
  return c == comm ? "blocking" : "polled";
}

TEST(MpiCommunicator, AllReduceMatchesScalarReference) {
  for (MpiCommunicator* world : worlds()) {
    uint64_t seed = 1;
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (size_t count : {size_t{1}, size_t{2}, size_t{17}, size_t{1001}, size_t{100003}}) {
        std::vector<uint8_t> data =
            test::pack(test::rank_input(seed, world->rank(), count, dtype, kFractionBits), dtype);
        world->all_reduce_sum(data.data(), count, dtype);
        const std::vector<uint8_t> expected = test::pack(
            test::reference_sum(seed, world->world_size(), count, dtype, kFractionBits), dtype);
        EXPECT_TRUE(data == expected)
            << kind(world) << " " << dtype_name(dtype) << " count " << count;
        ++seed;
      }
    }
  }
}

TEST(MpiCommunicator, AllGatherMatchesEveryRanksInput) {
  for (MpiCommunicator* world : worlds()) {
    for (size_t bytes : {size_t{1}, size_t{7}, size_t{65537}}) {
      const std::vector<uint8_t> send = test::gather_input(bytes, world->rank(), bytes);
      std::vector<uint8_t> recv(bytes * static_cast<size_t>(world->world_size()));
      world->all_gather(send.data(), recv.data(), bytes);
      for (int r = 0; r < world->world_size(); ++r) {
        const std::vector<uint8_t> expected = test::gather_input(bytes, r, bytes);
        EXPECT_EQ(std::memcmp(&recv[r * bytes], expected.data(), bytes), 0)
            << kind(world) << " " << bytes << " bytes, rank " << r;
      }
    }
  }
}

TEST(MpiCommunicator, BroadcastFromEveryRoot) {
  for (MpiCommunicator* world : worlds()) {
    for (int root = 0; root < world->world_size(); ++root) {
      std::vector<uint8_t> data = test::gather_input(7, world->rank(), 3001);
      world->broadcast(data.data(), data.size(), root);
      EXPECT_TRUE(data == test::gather_input(7, root, 3001)) << kind(world) << " root " << root;
    }
    char byte = 0;
    EXPECT_THROW(world->broadcast(&byte, 1, world->world_size()), Error);
  }
}

TEST(MpiCommunicator, ManyCollectivesInARow) {
  for (MpiCommunicator* world : worlds()) {
    for (uint64_t step = 0; step < 200; ++step) {
      const size_t count = 1 + (step * 7919) % 3000;
      std::vector<uint8_t> data = test::pack(
          test::rank_input(step, world->rank(), count, DType::kF32, kFractionBits), DType::kF32);
      world->barrier();
      world->all_reduce_sum(data.data(), count, DType::kF32);
      ASSERT_TRUE(data == test::pack(test::reference_sum(step, world->world_size(), count,
                                                         DType::kF32, kFractionBits),
                                     DType::kF32))
          << kind(world) << " step " << step;
    }
  }
}

// Splits as a pipeline's links are made: pairs of ranks (r, r + 1) for even r, rank 0 with the
// last rank (in reverse order by key), and everyone else left out. Each group's ranks, size and
// collectives are its own: a broadcast reaches only the group, an all-reduce sums only it.
TEST(MpiCommunicator, SplitGroupsAreTheirOwn) {
  const int r = comm->rank();
  const int n = comm->world_size();
  // Pairs {0, 1}, {2, 3}, ...; with an odd world the last rank is alone.
  std::unique_ptr<MpiCommunicator> pair = comm->split(r / 2, r);
  ASSERT_NE(pair, nullptr);
  const int pair_size = (r / 2) * 2 + 1 < n ? 2 : 1;
  EXPECT_EQ(pair->world_size(), pair_size);
  EXPECT_EQ(pair->rank(), r % 2);
  std::vector<uint8_t> data = test::gather_input(3, r, 501);
  pair->broadcast(data.data(), data.size(), 0);
  EXPECT_TRUE(data == test::gather_input(3, (r / 2) * 2, 501));
  float value = static_cast<float>(r + 1);
  pair->all_reduce_sum(&value, 1, DType::kF32);
  const int first = (r / 2) * 2;
  EXPECT_EQ(value, pair_size == 2 ? static_cast<float>(2 * first + 3) : static_cast<float>(r + 1));

  // Rank 0 and the last rank, keyed so that the last rank is rank 0 of the link.
  const bool in_link = r == 0 || r == n - 1;
  std::unique_ptr<MpiCommunicator> link = comm->split(in_link ? 0 : -1, r == 0 ? 1 : 0);
  ASSERT_EQ(link != nullptr, in_link);
  if (link) {
    EXPECT_EQ(link->world_size(), 2);
    EXPECT_EQ(link->rank(), r == 0 ? 1 : 0);
    int32_t message = r == 0 ? -1 : 4242;
    link->broadcast(&message, sizeof message, 0);
    EXPECT_EQ(message, 4242);
  }
  // The world still works after (and around) its splits.
  comm->barrier();
}

// A pipeline link as parallel_groups.cpp makes one over MPI: ranks 0 and 1 split from the
// world, rank 0 sending in the mode the thread level allows, both ends polling. Ranks past 1
// are in no link (nullptr).
std::unique_ptr<PairLink> open_link() {
  const int r = comm->rank();
  std::unique_ptr<MpiCommunicator> pair = comm->split(r < 2 ? 0 : -1, r);
  if (!pair) return nullptr;
  pair->set_idle_sleep(kIdleSleep);
  const PairLink::Mode mode = r == 0 ? PairLink::sending_mode(*pair) : PairLink::Mode::kBlocking;
  return std::make_unique<PairLink>(std::move(pair), mode);
}

std::vector<uint8_t> message(size_t bytes, int seed) {
  std::vector<uint8_t> m(bytes);
  for (size_t i = 0; i < bytes; ++i)
    m[i] = static_cast<uint8_t>(i * 31 + static_cast<size_t>(seed));
  return m;
}

// Open MPI builds MPI_THREAD_MULTIPLE support always since 3.0 (Debian's is 4.1): there, what
// main() asked for is what the process gets.
bool thread_level_is_known() {
#if defined(OMPI_MAJOR_VERSION) && OMPI_MAJOR_VERSION >= 3
  return true;
#else
  return false;
#endif
}

// What the engine's pipeline relies on: with MPI_THREAD_MULTIPLE the sending end queues, and
// without it the link falls back to sending on the caller's thread (a queued link over such a
// group is refused rather than let two threads call MPI); either way the messages arrive in
// order and whole, one of them too large for MPI to send eagerly.
TEST(MpiPairLink, SendingModeFollowsTheThreadLevel) {
  if (thread_level_is_known()) {
    EXPECT_EQ(comm->allows_concurrent_groups(), asked_multiple);
  }
  alarm(60);  // a wrong mode could leave the ranks waiting on each other
  const std::vector<size_t> sizes = {16, 300000, 4};
  std::unique_ptr<PairLink> link = open_link();
  if (link) {
    EXPECT_EQ(link->queued(), comm->rank() == 0 && comm->allows_concurrent_groups());
    for (size_t i = 0; i < sizes.size(); ++i) {
      std::vector<uint8_t> m = message(sizes[i], static_cast<int>(i));
      if (comm->rank() == 0) {
        link->send(m.data(), m.size());
      } else {
        std::vector<uint8_t> got(sizes[i]);
        link->receive(got.data(), got.size());
        EXPECT_TRUE(got == m) << "message " << i << " of " << sizes[i] << " bytes";
      }
    }
    if (comm->rank() == 0) link->flush();
  }
  if (!comm->allows_concurrent_groups()) {
    std::unique_ptr<MpiCommunicator> pair = comm->split(comm->rank() < 2 ? 0 : -1, comm->rank());
    if (pair) {
      EXPECT_THROW(PairLink queued(std::move(pair), PairLink::Mode::kQueued), Error);
    }
  }
  link.reset();
  comm->barrier();
  alarm(0);
}

// A queued send returns before the receiver has taken anything, even a message too large for
// MPI to send eagerly (4 MiB: its rendezvous needs the receiver): rank 0 sends three messages
// and only then meets the others at a barrier of the world, while its sender thread calls MPI
// beside that barrier; after the barrier rank 1 receives them, in order and whole. With sends
// that waited for the receiver, ranks 0 and 1 would wait on each other until the alarm.
TEST(MpiPairLink, QueuedSendsDoNotWaitForTheReceiver) {
  if (!comm->allows_concurrent_groups()) {
    GTEST_SKIP() << "MPI gave less than MPI_THREAD_MULTIPLE: links send on the caller's thread";
  }
  alarm(60);
  const std::vector<size_t> sizes = {1000, size_t{4} << 20, 8};
  std::unique_ptr<PairLink> link = open_link();
  if (comm->rank() == 0) {
    ASSERT_TRUE(link->queued());
    for (size_t i = 0; i < sizes.size(); ++i) {
      const std::vector<uint8_t> m = message(sizes[i], static_cast<int>(i));
      link->send(m.data(), m.size());
    }
    comm->barrier();
    link->flush();
  } else {
    comm->barrier();
    for (size_t i = 0; link && i < sizes.size(); ++i) {
      std::vector<uint8_t> got(sizes[i]);
      link->receive(got.data(), got.size());
      EXPECT_TRUE(got == message(sizes[i], static_cast<int>(i)))
          << "message " << i << " of " << sizes[i] << " bytes";
    }
  }
  link.reset();
  alarm(0);
}

}  // namespace
}  // namespace pagoda

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--threads=serialized") {
      pagoda::asked_multiple = false;
    } else if (arg != "--threads=multiple") {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  auto comm = std::make_unique<pagoda::MpiCommunicator>(
      pagoda::asked_multiple ? pagoda::MpiCommunicator::Threads::kMultiple
                             : pagoda::MpiCommunicator::Threads::kSerialized);
  pagoda::comm = comm.get();
  // A program mpirun failed to wire up runs as a group of one, where every test passes trivially.
  if (const char* expected = std::getenv("OMPI_COMM_WORLD_SIZE");
      expected != nullptr && std::atoi(expected) != comm->world_size()) {
    std::fprintf(stderr, "mpirun started %s ranks but this one sees a group of %d\n", expected,
                 comm->world_size());
    return 1;
  }
  std::unique_ptr<pagoda::MpiCommunicator> polled = comm->split(0, comm->rank());
  polled->set_idle_sleep(pagoda::kIdleSleep);
  pagoda::polled = polled.get();
  std::printf("rank %d of %d, %s\n", comm->rank(), comm->world_size(),
              comm->allows_concurrent_groups() ? "MPI_THREAD_MULTIPLE" : "one thread at a time");
  const int result = RUN_ALL_TESTS();
  polled.reset();
  comm.reset();  // MPI_Finalize
  return result;
}
