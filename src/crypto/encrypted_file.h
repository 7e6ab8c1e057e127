// Weight files encrypted at rest: `pagoda encrypt` writes them, the loader reads them back into
// memory only (never a plaintext file). AES-256-GCM over fixed-size chunks, so that a multi-GB
// shard decrypts on all cores and a damaged chunk is named:
//
//   offset  bytes  field (little-endian)
//        0      8  magic "PGDAENC1"
//        8     16  cipher name, NUL-padded: "AES-256-GCM"
//       24      4  chunk size in bytes (4 KiB .. 1 GiB)
//       28      4  reserved, 0
//       32      8  plaintext size in bytes
//       40     12  file nonce, random per file
//       52     12  reserved, 0
//       64     16  header tag: GCM over no text, the 64 header bytes as associated data
//       80         chunk i = 0..n-1: ciphertext (chunk size; the last one the rest) + 16-byte tag
//
// n = max(1, ceil(plaintext / chunk size)). Chunk i's nonce is the file nonce with its last 8
// bytes XORed with i (the header's with 2^64 - 1), and every chunk carries the header as
// associated data, so chunks cannot be reordered, moved between files or re-sized, and the
// header tag tells a wrong key from damage before any weight is decrypted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "crypto/model_key.h"
#include "util/huge_buffer.h"
#include "util/progress.h"

namespace pagoda::crypto {

inline constexpr size_t kHeaderBytes = 64;
inline constexpr size_t kTagBytes = 16;
inline constexpr uint32_t kDefaultChunkBytes = uint32_t{4} << 20;
inline constexpr uint32_t kMinChunkBytes = uint32_t{4} << 10;
inline constexpr uint32_t kMaxChunkBytes = uint32_t{1} << 30;

// True when `path` starts with the magic (false for a shorter or unreadable file).
bool is_encrypted_file(const std::string& path);

// The size `encrypt_file` gives a file of `plaintext_bytes`.
uint64_t encrypted_size(uint64_t plaintext_bytes, uint32_t chunk_bytes);

// Encrypts `in_path` into `out_path` (written beside it under a temporary name, then renamed).
// Throws pagoda::Error naming the file.
void encrypt_file(const std::string& in_path, const std::string& out_path, const ModelKey& key,
                  uint32_t chunk_bytes = kDefaultChunkBytes);

struct DecryptedFile {
  HugeBuffer bytes;     // huge pages when there are any (never swapped), else locked if allowed
  size_t size = 0;      // the plaintext's bytes (bytes.size_bytes() may be 1 for an empty file)
  bool locked = false;  // mlock succeeded (or the pages are hugetlbfs pages, never swapped)
};

// Decrypts `path` into memory, on all OpenMP threads. Throws pagoda::Error naming the file and
// the cause — not encrypted, an unknown cipher or chunk size, truncated or extended, the key
// does not open it, or chunk i fails authentication — after wiping whatever it had decrypted.
// Advances `progress` (optional) by the ciphertext bytes read.
DecryptedFile decrypt_file(const std::string& path, const ModelKey& key,
                           Progress* progress = nullptr);

}  // namespace pagoda::crypto
