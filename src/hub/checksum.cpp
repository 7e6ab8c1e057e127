// Streaming checksums of repository files; see checksum.h.
#include "hub/checksum.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "util/ascii.h"

namespace pagoda::hub {
namespace {

std::string to_hex(const uint8_t* bytes, size_t n) {
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) out += fmt::format("{:02x}", bytes[i]);
  return out;
}

}  // namespace

ContentChecksum::ContentChecksum(const RepoFile& file)
    : sha256_(!file.sha256.empty()), size_(file.size), expected_(ascii_lower(file.etag())) {
  reset();
}

void ContentChecksum::reset() {
  if (sha256_) {
    sha256_init(&sha256_ctx_);
  } else {
    sha1_init(&sha1_ctx_);
    // git hashes a header before the content, so the size is part of the id.
    const std::string header = fmt::format("blob {}", size_) + '\0';
    sha1_update(&sha1_ctx_, header.size(), reinterpret_cast<const uint8_t*>(header.data()));
  }
}

void ContentChecksum::update(std::string_view bytes) {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  if (sha256_) {
    sha256_update(&sha256_ctx_, bytes.size(), data);
  } else {
    sha1_update(&sha1_ctx_, bytes.size(), data);
  }
}

std::string ContentChecksum::hex() {
  if (sha256_) {
    uint8_t digest[SHA256_DIGEST_SIZE];
    sha256_digest(&sha256_ctx_, SHA256_DIGEST_SIZE, digest);
    return to_hex(digest, SHA256_DIGEST_SIZE);
  }
  uint8_t digest[SHA1_DIGEST_SIZE];
  sha1_digest(&sha1_ctx_, SHA1_DIGEST_SIZE, digest);
  return to_hex(digest, SHA1_DIGEST_SIZE);
}

}  // namespace pagoda::hub
