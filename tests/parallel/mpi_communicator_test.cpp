// The MPI communicator, run under mpirun by run_mpi_test.sh with 2 and 3 ranks (3: sizes never
// divide evenly). Every rank runs every test; mpirun fails if any rank does. Inputs have few
// fraction bits, so the reference sum is exact whatever order MPI sums in, and results are
// compared bit for bit (tests/parallel/reference.h).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "pagoda/error.h"
#include "parallel/mpi_communicator.h"
#include "parallel/reference.h"

namespace pagoda {
namespace {

MpiCommunicator* comm = nullptr;  // one per process, made in main() before the tests
constexpr int kFractionBits = 4;

TEST(MpiCommunicator, AllReduceMatchesScalarReference) {
  uint64_t seed = 1;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (size_t count : {size_t{1}, size_t{2}, size_t{17}, size_t{1001}, size_t{100003}}) {
      std::vector<uint8_t> data =
          test::pack(test::rank_input(seed, comm->rank(), count, dtype, kFractionBits), dtype);
      comm->all_reduce_sum(data.data(), count, dtype);
      const std::vector<uint8_t> expected = test::pack(
          test::reference_sum(seed, comm->world_size(), count, dtype, kFractionBits), dtype);
      EXPECT_TRUE(data == expected) << dtype_name(dtype) << " count " << count;
      ++seed;
    }
  }
}

TEST(MpiCommunicator, AllGatherMatchesEveryRanksInput) {
  for (size_t bytes : {size_t{1}, size_t{7}, size_t{65537}}) {
    const std::vector<uint8_t> send = test::gather_input(bytes, comm->rank(), bytes);
    std::vector<uint8_t> recv(bytes * static_cast<size_t>(comm->world_size()));
    comm->all_gather(send.data(), recv.data(), bytes);
    for (int r = 0; r < comm->world_size(); ++r) {
      const std::vector<uint8_t> expected = test::gather_input(bytes, r, bytes);
      EXPECT_EQ(std::memcmp(&recv[r * bytes], expected.data(), bytes), 0)
          << bytes << " bytes, rank " << r;
    }
  }
}

TEST(MpiCommunicator, BroadcastFromEveryRoot) {
  for (int root = 0; root < comm->world_size(); ++root) {
    std::vector<uint8_t> data = test::gather_input(7, comm->rank(), 3001);
    comm->broadcast(data.data(), data.size(), root);
    EXPECT_TRUE(data == test::gather_input(7, root, 3001)) << "root " << root;
  }
  char byte = 0;
  EXPECT_THROW(comm->broadcast(&byte, 1, comm->world_size()), Error);
}

TEST(MpiCommunicator, ManyCollectivesInARow) {
  for (uint64_t step = 0; step < 200; ++step) {
    const size_t count = 1 + (step * 7919) % 3000;
    std::vector<uint8_t> data = test::pack(
        test::rank_input(step, comm->rank(), count, DType::kF32, kFractionBits), DType::kF32);
    comm->barrier();
    comm->all_reduce_sum(data.data(), count, DType::kF32);
    ASSERT_TRUE(data == test::pack(test::reference_sum(step, comm->world_size(), count, DType::kF32,
                                                       kFractionBits),
                                   DType::kF32))
        << "step " << step;
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

}  // namespace
}  // namespace pagoda

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto comm = std::make_unique<pagoda::MpiCommunicator>();
  pagoda::comm = comm.get();
  // A program mpirun failed to wire up runs as a group of one, where every test passes trivially.
  if (const char* expected = std::getenv("OMPI_COMM_WORLD_SIZE");
      expected != nullptr && std::atoi(expected) != comm->world_size()) {
    std::fprintf(stderr, "mpirun started %s ranks but this one sees a group of %d\n", expected,
                 comm->world_size());
    return 1;
  }
  std::printf("rank %d of %d\n", comm->rank(), comm->world_size());
  const int result = RUN_ALL_TESTS();
  comm.reset();  // MPI_Finalize
  return result;
}
