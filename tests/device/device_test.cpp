#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <vector>

#include "device/cpu_device.h"
#include "device/execution_context.h"
#include "kernels/host_context.h"
#include "util/error.h"
#include "util/huge_buffer.h"

namespace pagoda {
namespace {

TEST(CpuDevice, AllocatesZeroedMemoryAndCountsItUntilFreed) {
  CpuDevice device;
  EXPECT_EQ(device.memory_usage().allocated_bytes, 0u);
  {
    DeviceBuffer buffer = device.allocate(10000);
    ASSERT_TRUE(buffer);
    EXPECT_EQ(buffer.size_bytes(), 10000u);
    EXPECT_GE(buffer.mapped_bytes(), 10000u);
    EXPECT_EQ(buffer.device(), &device);
    const auto* bytes = buffer.as<const uint8_t>();
    for (size_t i = 0; i < buffer.size_bytes(); ++i) ASSERT_EQ(bytes[i], 0) << i;
    EXPECT_EQ(device.memory_usage().allocated_bytes, buffer.mapped_bytes());
  }
  EXPECT_EQ(device.memory_usage().allocated_bytes, 0u);
}

TEST(CpuDevice, HugeFirstLeavesSmallBuffersOnNormalPages) {
  CpuDevice device;
  DeviceBuffer small = device.allocate(4096, {.policy = MemoryPolicy::kHugeFirst});
  EXPECT_FALSE(small.huge_pages());
  EXPECT_EQ(small.kind_name(), "plain pages");
  EXPECT_LT(small.mapped_bytes(), default_huge_page_bytes());
}

TEST(CpuDevice, HugeFirstFallsBackAndHugeOnlyRefusesToFallBack) {
  CpuDevice device;
  const size_t size = 2 * default_huge_page_bytes();
  // Huge-first always succeeds; whether it got huge pages depends on the machine.
  DeviceBuffer first = device.allocate(size);
  ASSERT_TRUE(first);
  EXPECT_EQ(first.mapped_bytes() % default_huge_page_bytes() == 0 || !first.huge_pages(), true);
  // Huge-only gives huge pages or an error, never plain pages.
  try {
    DeviceBuffer only = device.allocate(size, {.policy = MemoryPolicy::kHugeOnly});
    EXPECT_TRUE(only.huge_pages());
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no huge pages"), std::string::npos) << e.what();
    EXPECT_EQ(device.memory_usage().allocated_bytes, first.mapped_bytes());  // nothing leaked
  }
  DeviceBuffer normal = device.allocate(size, {.policy = MemoryPolicy::kNormalOnly});
  EXPECT_FALSE(normal.huge_pages());
}

TEST(CpuDevice, PrefaultedMemoryIsUsable) {
  CpuDevice device;
  DeviceBuffer buffer = device.allocate(3 << 20, {.prefault = true});
  auto* p = buffer.as<float>();
  p[0] = 1.0f;
  p[buffer.size_bytes() / sizeof(float) - 1] = 2.0f;
  EXPECT_EQ(p[0] + p[buffer.size_bytes() / sizeof(float) - 1], 3.0f);
}

TEST(CpuDevice, ZeroBytesIsAnError) {
  CpuDevice device;
  EXPECT_THROW(device.allocate(0), Error);
}

TEST(CpuDevice, MemoryUsageReportsTheMachine) {
  const MemoryUsage usage = CpuDevice().memory_usage();
  EXPECT_GT(usage.total_bytes, 0u);
  EXPECT_GT(usage.free_bytes, 0u);
  EXPECT_LE(usage.free_bytes, usage.total_bytes);
}

TEST(DeviceBuffer, MovesOwnershipAndFreesOnce) {
  CpuDevice device;
  DeviceBuffer a = device.allocate(8192);
  void* data = a.data();
  DeviceBuffer b = std::move(a);
  EXPECT_FALSE(a);
  EXPECT_EQ(b.data(), data);
  DeviceBuffer c = device.allocate(100);
  c = std::move(b);  // frees c's own allocation first
  EXPECT_EQ(c.data(), data);
  EXPECT_EQ(device.memory_usage().allocated_bytes, c.mapped_bytes());
  c.release();
  EXPECT_FALSE(c);
  EXPECT_EQ(device.memory_usage().allocated_bytes, 0u);
}

TEST(CpuDevice, CopiesAndSynchronizes) {
  CpuDevice device;
  DeviceBuffer src = device.allocate(1000);
  DeviceBuffer dst = device.allocate(1000);
  std::memset(src.data(), 0x5a, 1000);
  device.copy(dst.data(), src.data(), 1000, CopyKind::kDeviceToDevice);
  device.synchronize();
  EXPECT_EQ(std::memcmp(dst.data(), src.data(), 1000), 0);
}

TEST(CpuDevice, OneDevicePerProcess) {
  EXPECT_EQ(&cpu_device(), &cpu_device());
}

TEST(ThreadPool, ParallelForRunsEveryIterationOnce) {
  const ThreadPool pool;
  std::vector<std::atomic<int>> hits(1000);
  pool.parallel_for(1000, [&](int64_t i) { hits[static_cast<size_t>(i)]++; });
  for (const auto& h : hits) ASSERT_EQ(h.load(), 1);
  std::vector<std::atomic<int>> dynamic_hits(333);
  pool.parallel_for_dynamic(333, 4, [&](int64_t i) { dynamic_hits[static_cast<size_t>(i)]++; });
  for (const auto& h : dynamic_hits) ASSERT_EQ(h.load(), 1);
}

TEST(ThreadPool, SmallLoopsAndNestedLoopsStayOnTheCallingThread) {
  const ThreadPool pool;
  std::atomic<int> off_thread{0};
  pool.parallel_for(
      8, [&](int64_t) { off_thread += omp_get_thread_num() != 0; }, 8);
  EXPECT_EQ(off_thread.load(), 0);
  pool.parallel_for(4, [&](int64_t) { EXPECT_EQ(pool.num_threads(), 1); });
}

TEST(ExecutionContext, ActivationsComeFromItsDevice) {
  CpuDevice device;
  const ExecutionContext ctx(device, kernels());
  DeviceBuffer a = ctx.allocate_activations(4096);
  EXPECT_EQ(a.device(), &device);
  EXPECT_EQ(&ctx.device(), &device);
  EXPECT_EQ(&ctx.kernels(), &kernels());
  EXPECT_EQ(&host_execution_context().device(), &cpu_device());
}

}  // namespace
}  // namespace pagoda
