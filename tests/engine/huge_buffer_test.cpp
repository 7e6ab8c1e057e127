// HugeBuffer: allocates, is writable and zeroed, reports which pages it got, falls back.
#include "util/huge_buffer.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

namespace pagoda {
namespace {

void expect_usable(const HugeBuffer& buffer, size_t size_bytes) {
  ASSERT_NE(buffer.data(), nullptr);
  EXPECT_EQ(buffer.size_bytes(), size_bytes);
  EXPECT_GE(buffer.mapped_bytes(), size_bytes);
  auto* bytes = static_cast<uint8_t*>(buffer.data());
  EXPECT_EQ(bytes[0], 0);
  EXPECT_EQ(bytes[size_bytes - 1], 0);
  std::memset(bytes, 0xab, size_bytes);
  EXPECT_EQ(bytes[size_bytes / 2], 0xab);
  EXPECT_EQ(bytes[size_bytes - 1], 0xab);
}

TEST(HugeBuffer, AllocatesWritableMemoryAndReportsKind) {
  const size_t size = (size_t{8} << 20) + 123;
  HugeBuffer buffer = HugeBuffer::allocate(size);
  expect_usable(buffer, size);
  std::printf("HugeBuffer got %s (huge page %zu bytes, THP available %d)\n",
              std::string(buffer.kind_name()).c_str(), default_huge_page_bytes(),
              transparent_huge_pages_available() ? 1 : 0);
  if (buffer.kind() != PageKind::kPlain) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data()) % default_huge_page_bytes(), 0u);
    EXPECT_EQ(buffer.mapped_bytes() % default_huge_page_bytes(), 0u);
  }
  if (buffer.kind() != PageKind::kExplicitHuge && transparent_huge_pages_available()) {
    EXPECT_EQ(buffer.kind(), PageKind::kTransparentHuge);
  }
}

TEST(HugeBuffer, FallsBackToPlainPagesWhenHugePagesAreNotAllowed) {
  HugeBufferOptions options;
  options.allow_explicit_huge = false;
  options.allow_transparent_huge = false;
  options.prefault = true;
  HugeBuffer buffer = HugeBuffer::allocate(10000, options);
  EXPECT_EQ(buffer.kind(), PageKind::kPlain);
  EXPECT_EQ(buffer.kind_name(), "plain pages");
  expect_usable(buffer, 10000);
}

TEST(HugeBuffer, TransparentOnlyIsAlignedWhenAvailable) {
  if (!transparent_huge_pages_available()) GTEST_SKIP() << "THP disabled on this machine";
  HugeBufferOptions options;
  options.allow_explicit_huge = false;
  HugeBuffer buffer = HugeBuffer::allocate(size_t{4} << 20, options);
  EXPECT_EQ(buffer.kind(), PageKind::kTransparentHuge);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data()) % default_huge_page_bytes(), 0u);
  expect_usable(buffer, size_t{4} << 20);
}

// How many of the buffer's 4 KiB pages are in memory, by mincore().
size_t resident_pages(const HugeBuffer& buffer) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in_core((buffer.mapped_bytes() + page - 1) / page);
  EXPECT_EQ(mincore(buffer.data(), buffer.mapped_bytes(), in_core.data()), 0);
  size_t resident = 0;
  for (unsigned char flags : in_core) resident += flags & 1;
  return resident;
}

TEST(HugeBuffer, PrefaultBringsEveryPageInAndOnlyThen) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  // An odd number of huge pages, so the threads' shares do not divide it evenly.
  const size_t size = (size_t{13} << 20) + 5;
  for (bool allow_huge : {true, false}) {
    HugeBufferOptions options;
    options.allow_explicit_huge = allow_huge;
    options.allow_transparent_huge = allow_huge;
    const HugeBuffer lazy = HugeBuffer::allocate(size, options);
    EXPECT_EQ(resident_pages(lazy), 0u) << lazy.kind_name();
    options.prefault = true;
    const HugeBuffer reserved = HugeBuffer::allocate(size, options);
    EXPECT_EQ(resident_pages(reserved), reserved.mapped_bytes() / page) << reserved.kind_name();
    expect_usable(reserved, size);
  }
}

// The KV pool's reservation reports the bytes it faults in, the whole mapping in the end.
TEST(HugeBuffer, PrefaultAdvancesProgress) {
  ProgressOptions quiet;
  quiet.write_line = [](std::string_view) {};
  quiet.write_bar = [](std::string_view) {};
  Progress progress("reserving", 0, quiet);
  HugeBufferOptions options;
  options.prefault = true;
  options.progress = &progress;
  const HugeBuffer buffer = HugeBuffer::allocate((size_t{300} << 20) + 1, options);
  EXPECT_EQ(progress.done_bytes(), buffer.mapped_bytes());
}

TEST(HugeBuffer, MovesOwnership) {
  HugeBuffer a = HugeBuffer::allocate(4096);
  void* p = a.data();
  HugeBuffer b = std::move(a);
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(a.data(), nullptr);
  HugeBuffer c;
  c = std::move(b);
  EXPECT_EQ(c.data(), p);
  EXPECT_EQ(b.data(), nullptr);
}

TEST(HugeBuffer, RejectsZeroBytes) {
  EXPECT_ANY_THROW(HugeBuffer::allocate(0));
}

}  // namespace
}  // namespace pagoda
