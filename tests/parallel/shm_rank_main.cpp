// One rank of a shared-memory group as a program of its own, for the test that launches ranks as
// separate executables (not forked from one parent, so they share nothing but the segment name):
//   shm_rank JOB_ID RANK WORLD_SIZE COUNT
// Sums COUNT fp32 and bf16 values with the others, checks them against the scalar reference,
// gathers every rank's bytes; exits 0 when all matched, 1 (with a message) when not.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

#include "parallel/reference.h"
#include "parallel/shm_communicator.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s JOB_ID RANK WORLD_SIZE COUNT\n", argv[0]);
    return 2;
  }
  namespace test = pagoda::test;
  try {
    pagoda::ShmCommunicatorOptions options;
    options.job_id = argv[1];
    options.rank = std::atoi(argv[2]);
    options.world_size = std::atoi(argv[3]);
    options.slot_bytes = 16384;
    const size_t count = static_cast<size_t>(std::atol(argv[4]));
    pagoda::ShmCommunicator comm(options);
    for (pagoda::DType dtype : {pagoda::DType::kF32, pagoda::DType::kBF16}) {
      std::vector<uint8_t> data = test::pack(test::rank_input(9, comm.rank(), count, dtype), dtype);
      comm.all_reduce_sum(data.data(), count, dtype);
      if (data != test::pack(test::reference_sum(9, comm.world_size(), count, dtype), dtype)) {
        std::fprintf(stderr, "rank %d: %s sum differs from the reference\n", comm.rank(),
                     pagoda::dtype_name(dtype));
        return 1;
      }
    }
    const std::vector<uint8_t> send = test::gather_input(10, comm.rank(), count);
    std::vector<uint8_t> recv(count * static_cast<size_t>(comm.world_size()));
    comm.all_gather(send.data(), recv.data(), count);
    for (int r = 0; r < comm.world_size(); ++r) {
      const std::vector<uint8_t> expected = test::gather_input(10, r, count);
      if (!std::equal(expected.begin(), expected.end(), recv.begin() + r * count)) {
        std::fprintf(stderr, "rank %d: gathered part of rank %d differs\n", comm.rank(), r);
        return 1;
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %s: %s\n", argv[2], e.what());
    return 1;
  }
  return 0;
}
