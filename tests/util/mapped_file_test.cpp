// MappedFile in both memories (a map, a huge-page copy) gives the file's exact bytes; NUMA
// placement and the THP advice are safe no-ops where the machine has nothing to place.
#include "util/mapped_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "util/error.h"
#include "util/huge_buffer.h"
#include "util/numa.h"

namespace pagoda {
namespace {

std::string write_temp_file(const std::string& name, const std::vector<uint8_t>& bytes) {
  const std::string path =
      (std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()))).string();
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  return path;
}

std::vector<uint8_t> pattern(size_t size) {
  std::vector<uint8_t> bytes(size);
  uint32_t state = 12345;
  for (uint8_t& b : bytes) b = static_cast<uint8_t>((state = state * 1664525u + 1013904223u) >> 24);
  return bytes;
}

TEST(MappedFile, MapAndHugePageCopyHoldTheSameBytes) {
  const std::vector<uint8_t> bytes = pattern((size_t{5} << 20) + 77);  // spans huge pages + tail
  const std::string path = write_temp_file("pagoda_mapped_file", bytes);
  const MappedFile mapped(path, FileMemory::kMap);
  const MappedFile copied(path, FileMemory::kHugePageCopy);
  ASSERT_EQ(mapped.size(), bytes.size());
  ASSERT_EQ(copied.size(), bytes.size());
  EXPECT_EQ(std::vector<uint8_t>(mapped.data(), mapped.data() + mapped.size()), bytes);
  EXPECT_EQ(std::vector<uint8_t>(copied.data(), copied.data() + copied.size()), bytes);
  EXPECT_EQ(mapped.memory_name(), "file map");
  EXPECT_NE(copied.memory_name(), "file map");
  std::printf("huge-page copy got %s\n", std::string(copied.memory_name()).c_str());
  std::filesystem::remove(path);
}

// Copying a file into memory reports every byte read, in pieces (so a bar moves during a
// multi-GB shard); a map reads nothing up front and reports nothing.
TEST(MappedFile, HugePageCopyAdvancesProgressByTheFileSize) {
  const std::vector<uint8_t> bytes = pattern((size_t{130} << 20) + 5);  // three read chunks
  const std::string path = write_temp_file("pagoda_mapped_progress", bytes);
  int num_reports = 0;
  ProgressOptions options;
  options.first_report_s = 0;
  options.line_interval_s = 0;
  options.write_line = [&](std::string_view) { ++num_reports; };
  Progress copy_progress("reading", bytes.size(), options);
  const MappedFile copied(path, FileMemory::kHugePageCopy, &copy_progress);
  EXPECT_EQ(copy_progress.done_bytes(), bytes.size());
  EXPECT_EQ(num_reports, 3);
  Progress map_progress("reading", bytes.size(), options);
  const MappedFile mapped(path, FileMemory::kMap, &map_progress);
  EXPECT_EQ(map_progress.done_bytes(), 0u);
  std::filesystem::remove(path);
}

TEST(MappedFile, EmptyFilesAndErrorsNameThePath) {
  const std::string path = write_temp_file("pagoda_mapped_empty", {});
  for (FileMemory memory : {FileMemory::kMap, FileMemory::kHugePageCopy}) {
    const MappedFile f(path, memory);
    EXPECT_EQ(f.size(), 0u);
  }
  std::filesystem::remove(path);
  try {
    MappedFile missing("/nonexistent/pagoda/weights.safetensors", FileMemory::kHugePageCopy);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/pagoda/weights.safetensors: cannot open"),
              std::string::npos)
        << e.what();
  }
}

TEST(MappedFile, ParseFileMemoryNamesTheChoices) {
  EXPECT_EQ(parse_file_memory("mmap"), FileMemory::kMap);
  EXPECT_EQ(parse_file_memory("huge-pages"), FileMemory::kHugePageCopy);
  // The log names a choice as the flag takes it.
  EXPECT_STREQ(file_memory_name(FileMemory::kMap), "mmap");
  EXPECT_STREQ(file_memory_name(FileMemory::kHugePageCopy), "huge-pages");
  try {
    parse_file_memory("hugepages");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'mmap' or 'huge-pages'"), std::string::npos);
  }
}

TEST(Numa, InterleavingIsANoOpOnOneNodeAndKeepsTheData) {
  const int nodes = numa_node_count();
  EXPECT_GE(nodes, 1);
  std::printf("NUMA nodes: %d\n", nodes);
  HugeBufferOptions options;
  options.interleave_numa_nodes = false;
  HugeBuffer buffer = HugeBuffer::allocate(size_t{4} << 20, options);
  EXPECT_EQ(interleave_over_numa_nodes(buffer.data(), buffer.mapped_bytes()), nodes > 1);
  auto* p = static_cast<uint8_t*>(buffer.data());
  p[0] = 1;
  p[buffer.size_bytes() - 1] = 2;
  EXPECT_EQ(p[0] + p[buffer.size_bytes() - 1], 3);
  EXPECT_FALSE(interleave_over_numa_nodes(nullptr, 100));
}

TEST(AdviseHugePages, LeavesHeapMemoryIntact) {
  std::vector<uint8_t> heap(size_t{6} << 20);
  advise_huge_pages(heap.data(), heap.size());
  advise_huge_pages(heap.data() + 1, 100);  // no whole huge page inside: nothing to do
  for (size_t i = 0; i < heap.size(); i += 4096) heap[i] = static_cast<uint8_t>(i >> 12);
  EXPECT_EQ(heap[4096 * 3], 3);
}

}  // namespace
}  // namespace pagoda
