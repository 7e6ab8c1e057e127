// Where a model key comes from (crypto/model_key.h): files of hex or raw bytes, a variable, a
// command; and the errors that name the source without printing the key.
#include "crypto/model_key.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "util/error.h"

namespace pagoda::crypto {
namespace {

namespace fs = std::filesystem;

const std::string kHex = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

std::string write_file(const std::string& name, const std::string& content) {
  const fs::path path = fs::path(::testing::TempDir()) / name;
  std::ofstream(path, std::ios::binary) << content;
  return path.string();
}

std::string error_of(const ModelKeySource& source) {
  try {
    load_model_key(source);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelKey, ParsesHexWithSurroundingWhitespace) {
  const ModelKey key = ModelKey::parse("  " + kHex + "\n", "test");
  for (size_t i = 0; i < kModelKeyBytes; ++i) EXPECT_EQ(key.data()[i], i);
  EXPECT_EQ(key.hex(), kHex);
  EXPECT_EQ(
      ModelKey::parse(
          std::string("000102030405060708090A0B0C0D0E0F101112131415161718191A1B1C1D1E1F"), "t")
          .hex(),
      kHex);
}

TEST(ModelKey, TakesExactly32RawBytes) {
  std::string raw(32, '\0');
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<char>(255 - i);
  const ModelKey key = ModelKey::parse(raw, "test");
  EXPECT_EQ(key.data()[0], 255);
  EXPECT_EQ(key.data()[31], 224);
}

TEST(ModelKey, RejectsOtherLengthsWithoutPrintingThem) {
  for (const std::string& bad : {std::string(""), kHex.substr(2), kHex + "00",
                                 std::string(63, 'a') + "g", std::string(33, 'x')}) {
    try {
      ModelKey::parse(bad, "key file K");
      ADD_FAILURE() << "accepted " << bad.size() << " bytes";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("key file K"), std::string::npos) << e.what();
      if (bad.size() > 8) {
        EXPECT_EQ(std::string(e.what()).find(bad), std::string::npos) << e.what();
      }
    }
  }
}

TEST(ModelKey, LoadsFromAFile) {
  const ModelKey key = load_model_key({.file = write_file("key.hex", kHex + "\n")});
  EXPECT_EQ(key.hex(), kHex);
  EXPECT_NE(error_of({.file = "/nonexistent/key"}).find("/nonexistent/key"), std::string::npos);
}

TEST(ModelKey, LoadsFromAVariable) {
  ::setenv("PAGODA_TEST_MODEL_KEY", kHex.c_str(), 1);
  EXPECT_EQ(load_model_key({.environment_variable = "PAGODA_TEST_MODEL_KEY"}).hex(), kHex);
  ::unsetenv("PAGODA_TEST_MODEL_KEY");
  EXPECT_NE(error_of({.environment_variable = "PAGODA_TEST_MODEL_KEY"}).find("not set"),
            std::string::npos);
}

TEST(ModelKey, LoadsFromACommandAndReportsItsFailure) {
  EXPECT_EQ(load_model_key({.command = "printf '%s\\n' " + kHex}).hex(), kHex);
  // The key it printed before failing stays out of the message.
  const std::string failed = error_of({.command = "printf '%064d\\n' 7; exit 3"});
  EXPECT_NE(failed.find("exit status 3"), std::string::npos) << failed;
  EXPECT_EQ(failed.find(std::string(63, '0') + "7"), std::string::npos) << failed;
  EXPECT_NE(error_of({.command = "echo short"}).find("output of model key command"),
            std::string::npos);
}

TEST(ModelKey, WantsExactlyOneSource) {
  EXPECT_NE(error_of({}).find("no model key"), std::string::npos);
  EXPECT_NE(error_of({.file = "a", .command = "b"}).find("more than one"), std::string::npos);
}

TEST(ModelKey, GeneratesDistinctKeys) {
  EXPECT_NE(generate_model_key().hex(), generate_model_key().hex());
}

}  // namespace
}  // namespace pagoda::crypto
