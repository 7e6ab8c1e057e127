// Sizes on the command line (--kv-cache-space) parse as a vLLM user would expect.
#include <gtest/gtest.h>

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

TEST(ParseByteSize, RejectsGarbageWithTheTextInTheMessage) {
  for (const char* bad : {"", "GiB", "4XB", "1.2.3G", "-4GiB"}) {
    try {
      parse_byte_size(bad);
      FAIL() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos) << e.what();
    }
  }
}

TEST(FormatBytes, PicksABinaryUnit) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(3ull << 29), "1.50 GiB");
}

}  // namespace
}  // namespace pagoda
