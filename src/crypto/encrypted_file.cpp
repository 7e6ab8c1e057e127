#include "crypto/encrypted_file.h"

#include <sys/mman.h>
#include <unistd.h>
#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <vector>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "util/error.h"
#include "util/mapped_file.h"

namespace pagoda::crypto {
namespace {

constexpr char kMagic[8] = {'P', 'G', 'D', 'A', 'E', 'N', 'C', '1'};
constexpr char kCipherName[16] = "AES-256-GCM";
constexpr size_t kNonceBytes = 12;
constexpr uint64_t kHeaderIndex = std::numeric_limits<uint64_t>::max();

struct Header {
  uint32_t chunk_bytes = 0;
  uint64_t plaintext_bytes = 0;
  std::array<uint8_t, kNonceBytes> nonce{};
};

void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{p[i]} << (8 * i);
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

std::array<uint8_t, kHeaderBytes> encode_header(const Header& h) {
  std::array<uint8_t, kHeaderBytes> out{};
  std::memcpy(out.data(), kMagic, sizeof kMagic);
  std::memcpy(out.data() + 8, kCipherName, sizeof kCipherName);
  put_u32(out.data() + 24, h.chunk_bytes);
  put_u64(out.data() + 32, h.plaintext_bytes);
  std::memcpy(out.data() + 40, h.nonce.data(), kNonceBytes);
  return out;
}

uint64_t num_chunks(uint64_t plaintext_bytes, uint32_t chunk_bytes) {
  return std::max<uint64_t>(1, (plaintext_bytes + chunk_bytes - 1) / chunk_bytes);
}

std::array<uint8_t, kNonceBytes> chunk_nonce(const std::array<uint8_t, kNonceBytes>& file_nonce,
                                             uint64_t index) {
  std::array<uint8_t, kNonceBytes> nonce = file_nonce;
  for (int i = 0; i < 8; ++i) nonce[4 + i] ^= static_cast<uint8_t>(index >> (8 * i));
  return nonce;
}

struct CipherContext {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  CipherContext() {
    if (ctx == nullptr) fail("OpenSSL: cannot allocate a cipher context");
  }
  ~CipherContext() { EVP_CIPHER_CTX_free(ctx); }
  CipherContext(const CipherContext&) = delete;
  CipherContext& operator=(const CipherContext&) = delete;
};

// One GCM message: `aad` authenticated, `size` bytes of `in` encrypted into `out`, the tag
// written to `tag`. Returns false only on an OpenSSL failure.
bool seal(EVP_CIPHER_CTX* ctx, const uint8_t* key, const std::array<uint8_t, kNonceBytes>& nonce,
          const uint8_t* aad, size_t aad_bytes, const uint8_t* in, size_t size, uint8_t* out,
          uint8_t* tag) {
  int len = 0;
  return EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr, key, nonce.data()) == 1 &&
         EVP_EncryptUpdate(ctx, nullptr, &len, aad, static_cast<int>(aad_bytes)) == 1 &&
         (size == 0 || EVP_EncryptUpdate(ctx, out, &len, in, static_cast<int>(size)) == 1) &&
         EVP_EncryptFinal_ex(ctx, out + size, &len) == 1 &&
         EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, kTagBytes, tag) == 1;
}

// The inverse; false when the tag does not match (or OpenSSL fails).
bool open_sealed(EVP_CIPHER_CTX* ctx, const uint8_t* key,
                 const std::array<uint8_t, kNonceBytes>& nonce, const uint8_t* aad,
                 size_t aad_bytes, const uint8_t* in, size_t size, uint8_t* out,
                 const uint8_t* tag) {
  int len = 0;
  return EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr, key, nonce.data()) == 1 &&
         EVP_DecryptUpdate(ctx, nullptr, &len, aad, static_cast<int>(aad_bytes)) == 1 &&
         (size == 0 || EVP_DecryptUpdate(ctx, out, &len, in, static_cast<int>(size)) == 1) &&
         EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, kTagBytes, const_cast<uint8_t*>(tag)) ==
             1 &&
         EVP_DecryptFinal_ex(ctx, out + size, &len) == 1;
}

// Parses and checks the header of a mapped encrypted file, everything but its tag.
Header read_header(const MappedFile& file) {
  const std::string& path = file.path();
  if (file.size() < kHeaderBytes + kTagBytes ||
      std::memcmp(file.data(), kMagic, sizeof kMagic) != 0) {
    fail("{}: not an encrypted weight file (no PGDAENC1 header)", path);
  }
  const uint8_t* p = file.data();
  if (std::memcmp(p + 8, kCipherName, sizeof kCipherName) != 0) {
    const std::string name(reinterpret_cast<const char*>(p + 8),
                           strnlen(reinterpret_cast<const char*>(p + 8), 16));
    fail("{}: cipher '{}' is not one Pagoda reads (AES-256-GCM)", path, name);
  }
  Header h;
  h.chunk_bytes = get_u32(p + 24);
  h.plaintext_bytes = get_u64(p + 32);
  std::memcpy(h.nonce.data(), p + 40, kNonceBytes);
  const bool reserved_zero = get_u32(p + 28) == 0 && std::all_of(p + 52, p + kHeaderBytes,
                                                                 [](uint8_t b) { return b == 0; });
  if (!reserved_zero)
    fail("{}: reserved header bytes are not zero: a newer format, or damage", path);
  if (h.chunk_bytes < kMinChunkBytes || h.chunk_bytes > kMaxChunkBytes) {
    fail("{}: chunk size {} outside {}..{}", path, h.chunk_bytes, kMinChunkBytes, kMaxChunkBytes);
  }
  const uint64_t expected = encrypted_size(h.plaintext_bytes, h.chunk_bytes);
  if (file.size() < expected) {
    fail("{}: truncated: {} bytes, the header promises {}", path, file.size(), expected);
  }
  if (file.size() > expected) {
    fail("{}: {} bytes after the last chunk: the file was extended or damaged", path,
         file.size() - expected);
  }
  return h;
}

// Keeps decrypted bytes from reaching swap: hugetlbfs pages never do; other pages are locked
// when RLIMIT_MEMLOCK allows.
bool lock_in_memory(const HugeBuffer& buffer) {
  if (buffer.kind() == PageKind::kExplicitHuge) return true;
  return ::mlock(buffer.data(), buffer.mapped_bytes()) == 0;
}

}  // namespace

uint64_t encrypted_size(uint64_t plaintext_bytes, uint32_t chunk_bytes) {
  return kHeaderBytes + kTagBytes + plaintext_bytes +
         num_chunks(plaintext_bytes, chunk_bytes) * kTagBytes;
}

bool is_encrypted_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char head[sizeof kMagic] = {};
  in.read(head, sizeof head);
  return in.gcount() == sizeof head && std::memcmp(head, kMagic, sizeof kMagic) == 0;
}

void encrypt_file(const std::string& in_path, const std::string& out_path, const ModelKey& key,
                  uint32_t chunk_bytes) {
  if (chunk_bytes < kMinChunkBytes || chunk_bytes > kMaxChunkBytes) {
    fail("chunk size {} outside {}..{}", chunk_bytes, kMinChunkBytes, kMaxChunkBytes);
  }
  const MappedFile in(in_path);
  Header h;
  h.chunk_bytes = chunk_bytes;
  h.plaintext_bytes = in.size();
  if (RAND_bytes(h.nonce.data(), kNonceBytes) != 1) fail("{}: RAND_bytes failed", out_path);
  const std::array<uint8_t, kHeaderBytes> header = encode_header(h);

  const std::string tmp_path = out_path + ".partial";
  std::unique_ptr<FILE, int (*)(FILE*)> out(std::fopen(tmp_path.c_str(), "wb"), &std::fclose);
  if (!out) fail("{}: cannot create: {}", tmp_path, std::strerror(errno));
  // A failed write leaves no .partial file behind.
  struct RemoveUnlessRenamed {
    const std::string& path;
    bool renamed = false;
    ~RemoveUnlessRenamed() {
      std::error_code ignored;
      if (!renamed) std::filesystem::remove(path, ignored);
    }
  } partial{tmp_path};
  auto write = [&](const uint8_t* data, size_t size) {
    if (size != 0 && std::fwrite(data, 1, size, out.get()) != size) {
      fail("{}: cannot write: {}", tmp_path, std::strerror(errno));
    }
  };
  CipherContext cipher;
  std::array<uint8_t, kTagBytes> tag{};
  if (!seal(cipher.ctx, key.data(), chunk_nonce(h.nonce, kHeaderIndex), header.data(), kHeaderBytes,
            nullptr, 0, nullptr, tag.data())) {
    fail("{}: OpenSSL failed to seal the header", out_path);
  }
  write(header.data(), kHeaderBytes);
  write(tag.data(), kTagBytes);
  std::vector<uint8_t> sealed(chunk_bytes);
  const uint64_t n = num_chunks(h.plaintext_bytes, chunk_bytes);
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t begin = i * chunk_bytes;
    const size_t size =
        static_cast<size_t>(std::min<uint64_t>(chunk_bytes, h.plaintext_bytes - begin));
    if (!seal(cipher.ctx, key.data(), chunk_nonce(h.nonce, i), header.data(), kHeaderBytes,
              in.data() + begin, size, sealed.data(), tag.data())) {
      fail("{}: OpenSSL failed to seal chunk {}", out_path, i);
    }
    write(sealed.data(), size);
    write(tag.data(), kTagBytes);
  }
  if (std::fflush(out.get()) != 0 || ::fsync(::fileno(out.get())) != 0) {
    fail("{}: cannot write: {}", tmp_path, std::strerror(errno));
  }
  out.reset();
  std::error_code ec;
  std::filesystem::rename(tmp_path, out_path, ec);
  if (ec) fail("{}: cannot rename {} to it: {}", out_path, tmp_path, ec.message());
  partial.renamed = true;
}

DecryptedFile decrypt_file(const std::string& path, const ModelKey& key, Progress* progress) {
  const MappedFile file(path);
  const Header h = read_header(file);
  const uint8_t* header = file.data();
  {
    CipherContext cipher;
    if (!open_sealed(cipher.ctx, key.data(), chunk_nonce(h.nonce, kHeaderIndex), header,
                     kHeaderBytes, nullptr, 0, nullptr, header + kHeaderBytes)) {
      fail("{}: the model key does not open this file (a wrong key, or an altered header)", path);
    }
  }

  DecryptedFile out;
  out.size = static_cast<size_t>(h.plaintext_bytes);
  out.bytes = HugeBuffer::allocate(std::max<size_t>(out.size, 1));
  out.locked = lock_in_memory(out.bytes);
  auto* dst = static_cast<uint8_t*>(out.bytes.data());
  const auto n = static_cast<int64_t>(num_chunks(h.plaintext_bytes, h.chunk_bytes));
  const size_t stride = size_t{h.chunk_bytes} + kTagBytes;
  std::atomic<int64_t> first_bad{n};
#pragma omp parallel
  {
    CipherContext cipher;
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t begin = static_cast<uint64_t>(i) * h.chunk_bytes;
      const size_t size =
          static_cast<size_t>(std::min<uint64_t>(h.chunk_bytes, h.plaintext_bytes - begin));
      const uint8_t* sealed =
          file.data() + kHeaderBytes + kTagBytes + static_cast<size_t>(i) * stride;
      if (!open_sealed(cipher.ctx, key.data(), chunk_nonce(h.nonce, static_cast<uint64_t>(i)),
                       header, kHeaderBytes, sealed, size, dst + begin, sealed + size)) {
        int64_t seen = first_bad.load();
        while (i < seen && !first_bad.compare_exchange_weak(seen, i)) {
        }
      }
      if (progress != nullptr) progress->advance(size + kTagBytes);
    }
  }
  if (const int64_t bad = first_bad.load(); bad < n) {
    OPENSSL_cleanse(dst, out.size);
    const uint64_t begin = static_cast<uint64_t>(bad) * h.chunk_bytes;
    fail(
        "{}: chunk {} of {} (plaintext bytes {}..{}) fails authentication: the file was altered "
        "or damaged",
        path, bad, n, begin, std::min<uint64_t>(begin + h.chunk_bytes, h.plaintext_bytes));
  }
  return out;
}

}  // namespace pagoda::crypto
