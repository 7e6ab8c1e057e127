// Sizes on the command line (--kv-cache-space) parse as a vLLM user would expect.
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "util/error.h"
#include "util/units.h"

namespace pagoda {
namespace {

TEST(ParseByteSize, UnitsArePowersOf1000Or1024) {
  EXPECT_EQ(parse_byte_size("1073741824"), 1073741824u);
  EXPECT_EQ(parse_byte_size("4GiB"), 4ull << 30);
  EXPECT_EQ(parse_byte_size("4gib"), 4ull << 30);
  EXPECT_EQ(parse_byte_size("512MiB"), 512ull << 20);
  EXPECT_EQ(parse_byte_size("2GB"), 2000000000u);
  EXPECT_EQ(parse_byte_size("1.5GiB"), 3ull << 29);
  EXPECT_EQ(parse_byte_size("10k"), 10000u);
}

// Each of `bad` must throw pagoda::Error quoting the text.
template <typename Parse>
void expect_rejected(Parse parse, std::initializer_list<const char*> bad) {
  for (const char* text : bad) {
    try {
      parse(text);
      ADD_FAILURE() << "accepted '" << text << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + text + "'"), std::string::npos)
          << e.what();
    }
  }
}

TEST(ParseByteSize, RejectsGarbageWithTheTextInTheMessage) {
  expect_rejected(parse_byte_size, {"", "GiB", "4XB", "1.2.3G", "-4GiB"});
}

// vLLM's human_readable_int: lowercase suffixes are decimal, uppercase binary.
TEST(ParseCount, LowercaseIsDecimalAndUppercaseIsBinaryAsInVllm) {
  EXPECT_EQ(parse_count("4096"), 4096);
  EXPECT_EQ(parse_count("1k"), 1000);
  EXPECT_EQ(parse_count("1K"), 1024);
  EXPECT_EQ(parse_count("2k"), 2000);
  EXPECT_EQ(parse_count("32K"), 32768);
  EXPECT_EQ(parse_count("25.6k"), 25600);
  EXPECT_EQ(parse_count("1m"), 1000000);
  EXPECT_EQ(parse_count("1M"), 1048576);
  EXPECT_EQ(parse_count("1G"), 1073741824);
  EXPECT_EQ(parse_count("2t"), 2000000000000);
}

TEST(ParseCount, RejectsWhatVllmRejectsWithTheTextInTheMessage) {
  expect_rejected(parse_count, {"", "k", "1.5K", "2.5", "1kb", "1x", "-4", "1..2k", ".5k", "4 k"});
}

TEST(FormatBytes, PicksABinaryUnit) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(3ull << 29), "1.50 GiB");
}

}  // namespace
}  // namespace pagoda
