// The encrypted weight format (crypto/encrypted_file.h): round trips at every chunk boundary,
// the errors for a wrong key, an altered header or chunk, a truncated or extended file, and the
// same bytes through a Python implementation of the documented format in both directions.
#include "crypto/encrypted_file.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "common/test_paths.h"
#include "util/error.h"

namespace pagoda::crypto {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t kChunk = kMinChunkBytes;  // small, so that a few KiB span several chunks
const std::string kKeyHex = "8f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";

std::string temp_path(const std::string& name) {
  return (fs::path(::testing::TempDir()) / ("pagoda_crypto_" + name)).string();
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

ModelKey test_key() {
  return ModelKey::parse(kKeyHex, "test key");
}

std::vector<uint8_t> decrypted(const std::string& path, const ModelKey& key) {
  DecryptedFile d = decrypt_file(path, key);
  const auto* p = static_cast<const uint8_t*>(d.bytes.data());
  return {p, p + d.size};
}

std::string decrypt_error(const std::string& path, const ModelKey& key) {
  try {
    decrypt_file(path, key);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// An encrypted file of `size` random bytes in three chunks and a bit; returns its path.
std::string encrypted_sample(const std::string& name, size_t size = 3 * kChunk + 100) {
  const std::string plain = temp_path(name + ".plain");
  const std::string sealed = temp_path(name + ".enc");
  write_bytes(plain, random_bytes(size, 7));
  encrypt_file(plain, sealed, test_key(), kChunk);
  return sealed;
}

TEST(EncryptedFile, RoundTripsAtEveryChunkBoundary) {
  const ModelKey key = test_key();
  for (const size_t size : {size_t{0}, size_t{1}, size_t{kChunk - 1}, size_t{kChunk},
                            size_t{kChunk + 1}, size_t{3 * kChunk}, size_t{5 * kChunk + 17}}) {
    const std::string plain = temp_path("rt.plain");
    const std::string sealed = temp_path("rt.enc");
    const std::vector<uint8_t> bytes = random_bytes(size, static_cast<uint32_t>(size));
    write_bytes(plain, bytes);
    encrypt_file(plain, sealed, key, kChunk);
    EXPECT_TRUE(is_encrypted_file(sealed));
    EXPECT_FALSE(is_encrypted_file(plain));
    EXPECT_EQ(fs::file_size(sealed), encrypted_size(size, kChunk));
    EXPECT_EQ(decrypted(sealed, key), bytes) << size << " bytes";
    EXPECT_FALSE(fs::exists(sealed + ".partial"));
  }
}

TEST(EncryptedFile, SameInputTwiceGivesDifferentCiphertext) {
  const std::string plain = temp_path("twice.plain");
  write_bytes(plain, random_bytes(1000, 1));
  encrypt_file(plain, temp_path("twice.1"), test_key(), kChunk);
  encrypt_file(plain, temp_path("twice.2"), test_key(), kChunk);
  EXPECT_NE(read_bytes(temp_path("twice.1")), read_bytes(temp_path("twice.2")));  // per-file nonce
}

TEST(EncryptedFile, AWrongKeyIsToldApartBeforeAnyChunk) {
  const std::string sealed = encrypted_sample("wrongkey");
  const std::string error = decrypt_error(sealed, generate_model_key());
  EXPECT_NE(error.find(sealed), std::string::npos) << error;
  EXPECT_NE(error.find("does not open"), std::string::npos) << error;
}

TEST(EncryptedFile, AnAlteredChunkIsNamed) {
  const std::string sealed = encrypted_sample("tamper");
  std::vector<uint8_t> bytes = read_bytes(sealed);
  bytes[kHeaderBytes + kTagBytes + 2 * (kChunk + kTagBytes) + 5] ^= 1;  // inside chunk 2
  write_bytes(sealed, bytes);
  const std::string error = decrypt_error(sealed, test_key());
  EXPECT_NE(error.find(sealed), std::string::npos) << error;
  EXPECT_NE(error.find("chunk 2 of 4"), std::string::npos) << error;
}

TEST(EncryptedFile, SwappedChunksFail) {
  const std::string sealed = encrypted_sample("swap", 3 * kChunk);
  std::vector<uint8_t> bytes = read_bytes(sealed);
  const size_t first = kHeaderBytes + kTagBytes;
  std::swap_ranges(bytes.begin() + first, bytes.begin() + first + kChunk + kTagBytes,
                   bytes.begin() + first + kChunk + kTagBytes);
  write_bytes(sealed, bytes);
  EXPECT_NE(decrypt_error(sealed, test_key()).find("chunk 0 of 3"), std::string::npos);
}

TEST(EncryptedFile, AnAlteredHeaderFails) {
  // The plaintext size, changed together with the file's length so that only the tag can tell.
  const std::string sealed = encrypted_sample("header", 2 * kChunk);
  std::vector<uint8_t> bytes = read_bytes(sealed);
  ASSERT_EQ(bytes[32], 0x00);  // 8192 = 0x2000, little-endian
  ASSERT_EQ(bytes[33], 0x20);
  bytes[32] = 0xff;  // 8191
  bytes[33] = 0x1f;
  bytes.pop_back();
  write_bytes(sealed, bytes);
  EXPECT_NE(decrypt_error(sealed, test_key()).find("does not open"), std::string::npos);
}

TEST(EncryptedFile, TruncatedAndExtendedFilesAreNamed) {
  const std::string sealed = encrypted_sample("length");
  std::vector<uint8_t> bytes = read_bytes(sealed);
  write_bytes(sealed, {bytes.begin(), bytes.end() - 1});
  std::string error = decrypt_error(sealed, test_key());
  EXPECT_NE(error.find("truncated"), std::string::npos) << error;
  EXPECT_NE(error.find(sealed), std::string::npos) << error;
  bytes.push_back(0);
  write_bytes(sealed, bytes);
  EXPECT_NE(decrypt_error(sealed, test_key()).find("1 bytes after the last chunk"),
            std::string::npos);
  write_bytes(sealed, {bytes.begin(), bytes.begin() + 40});
  EXPECT_NE(decrypt_error(sealed, test_key()).find("not an encrypted weight file"),
            std::string::npos);
}

TEST(EncryptedFile, UnknownCipherAndChunkSizeAreRefused) {
  const std::string sealed = encrypted_sample("cipher");
  std::vector<uint8_t> bytes = read_bytes(sealed);
  bytes[12] = '1';  // "AES-156-GCM"
  write_bytes(sealed, bytes);
  EXPECT_NE(decrypt_error(sealed, test_key()).find("cipher 'AES-156-GCM'"), std::string::npos);
  EXPECT_THROW(encrypt_file(sealed, temp_path("c2"), test_key(), 100), Error);
}

// ---- The same format written independently in Python ----

bool have_python_reference() {
  return std::system(
             "python3 -c 'import cryptography.hazmat.primitives.ciphers.aead' 2>/dev/null") == 0;
}

std::string reference_script() {
  return (test::source_dir() / "tests/crypto/encrypted_file_reference.py").string();
}

TEST(EncryptedFile, PythonReadsWhatWeWrite) {
  if (!have_python_reference()) GTEST_SKIP() << "python3-cryptography not installed";
  const std::string sealed = encrypted_sample("to_python", 4 * kChunk + 3);
  const std::string out = temp_path("from_python.plain");
  ASSERT_EQ(std::system(
                ("python3 " + reference_script() + " decrypt " + kKeyHex + " " + sealed + " " + out)
                    .c_str()),
            0);
  EXPECT_EQ(read_bytes(out), random_bytes(4 * kChunk + 3, 7));
}

TEST(EncryptedFile, WeReadWhatPythonWrites) {
  if (!have_python_reference()) GTEST_SKIP() << "python3-cryptography not installed";
  const std::string plain = temp_path("py.plain");
  const std::string sealed = temp_path("py.enc");
  const std::vector<uint8_t> bytes = random_bytes(2 * 8192 + 5, 3);
  write_bytes(plain, bytes);
  ASSERT_EQ(std::system(("python3 " + reference_script() + " encrypt " + kKeyHex + " 8192 " +
                         plain + " " + sealed)
                            .c_str()),
            0);
  EXPECT_EQ(decrypted(sealed, test_key()), bytes);
  // And the reference rejects the same damage the C++ code does.
  std::vector<uint8_t> damaged = read_bytes(sealed);
  damaged[kHeaderBytes + kTagBytes + 1] ^= 0x80;
  write_bytes(sealed, damaged);
  EXPECT_NE(std::system(("python3 " + reference_script() + " decrypt " + kKeyHex + " " + sealed +
                         " " + plain + " 2>/dev/null")
                            .c_str()),
            0);
  EXPECT_NE(decrypt_error(sealed, test_key()).find("chunk 0 of 3"), std::string::npos);
}

}  // namespace
}  // namespace pagoda::crypto
