// The checksum a repository lists for a file, computed over the bytes as they arrive: SHA-256
// of the content for LFS files, the git blob id (SHA-1 of "blob <size>\0" + content) for the
// others. The Hub gives these as the files' etags, and the cache names blobs after them.
#pragma once

#include <nettle/sha1.h>
#include <nettle/sha2.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "hub/hub_api.h"

namespace pagoda::hub {

class ContentChecksum {
 public:
  explicit ContentChecksum(const RepoFile& file);
  void reset();  // back to no bytes seen
  void update(std::string_view bytes);
  std::string hex();  // lower-case hex; call once, after the last update
  const std::string& expected() const { return expected_; }
  const char* kind() const { return sha256_ ? "sha256" : "git sha1"; }

 private:
  bool sha256_;
  uint64_t size_;
  std::string expected_;
  sha256_ctx sha256_ctx_;
  sha1_ctx sha1_ctx_;
};

}  // namespace pagoda::hub
