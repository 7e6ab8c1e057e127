// The single-process communicator: world size 1, every collective the identity, and the checks
// every implementation shares.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "parallel/communicator.h"
#include "util/error.h"

namespace pagoda {
namespace {

TEST(SingleProcessCommunicator, CollectivesAreTheIdentity) {
  SingleProcessCommunicator comm;
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.world_size(), 1);

  std::vector<float> values = {1.5f, -2.25f, 3.0f};
  comm.all_reduce_sum_f32(values);
  EXPECT_EQ(values, (std::vector<float>{1.5f, -2.25f, 3.0f}));

  std::vector<bf16_t> halves = {f32_to_bf16(0.5f), f32_to_bf16(-7.0f)};
  comm.all_reduce_sum_bf16(halves);
  EXPECT_EQ(bf16_to_f32(halves[1]), -7.0f);

  const char send[] = "abc";
  char recv[4] = {};
  comm.all_gather(send, recv, 4);
  EXPECT_STREQ(recv, "abc");

  char data[] = "xyz";
  comm.broadcast(data, 3, 0);
  EXPECT_STREQ(data, "xyz");
  comm.barrier();
}

TEST(SingleProcessCommunicator, RejectsWhatNoImplementationCanDo) {
  SingleProcessCommunicator comm;
  int8_t q[4] = {};
  EXPECT_THROW(comm.all_reduce_sum(q, 4, DType::kI8), Error);
  char data[1] = {};
  EXPECT_THROW(comm.broadcast(data, 1, 1), Error);
  EXPECT_THROW(comm.broadcast(data, 1, -1), Error);
}

}  // namespace
}  // namespace pagoda
