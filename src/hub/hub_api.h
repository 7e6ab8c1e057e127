// The Hub's HTTP API, the part a download needs: a repository's file list at a revision (with
// sizes and checksums) and each file's address, and the errors a user acts on.
//   GET {endpoint}/api/models/{org}/{name}/revision/{revision}?blobs=true
//       {"sha": commit, "gated": false|"auto"|"manual",
//        "siblings": [{"rfilename", "size", "blobId", "lfs": {"sha256", "size"}}]}
//   GET {endpoint}/{org}/{name}/resolve/{commit}/{path}   (LFS files: 302 to a CDN)
// Errors come as a status and an X-Error-Code header: RepositoryNotFound (401 or 404: the Hub
// does not tell a missing repo from a private one without a token), GatedRepo, RevisionNotFound,
// EntryNotFound.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hub/http_client.h"
#include "hub/hub_settings.h"
#include "util/error.h"

namespace pagoda::hub {

struct RepoFile {
  std::string path;  // in the repo, '/'-separated
  uint64_t size = 0;
  // The expected checksum, which also names the file's blob in the cache (huggingface_hub's
  // etag): LFS files carry the content's SHA-256; other files the git blob id, a SHA-1 of
  // "blob <size>\0" + content.
  std::string sha256;
  std::string git_sha1;
  const std::string& etag() const { return sha256.empty() ? git_sha1 : sha256; }
};

struct RepoInfo {
  std::string repo_id;
  std::string revision;  // as asked ("main", a tag, a commit)
  std::string commit;    // what it pointed at
  bool gated = false;
  std::vector<RepoFile> files;
};

// Throws pagoda::Error with the cause: unreachable endpoint, missing repo or revision, a gated
// or private repo without a (valid) token.
RepoInfo fetch_repo_info(HttpClient& http, const HubSettings& settings, const std::string& repo_id,
                         const std::string& revision);

// Where one file of the repo is downloaded from: the Hub's at `info.commit`, so that every file
// comes from the same commit even if the branch moves meanwhile.
std::string file_url(const HubSettings& settings, const RepoInfo& info, const std::string& path);

// The endpoint could not be reached at all (no network, a wrong HF_ENDPOINT): the caller may
// fall back to the cache.
class HubUnreachable : public Error {
 public:
  using Error::Error;
};

// The pagoda::Error for a request that failed (`result.error` set or a status other than
// 200/206), HubUnreachable when nothing answered; `what` names the thing asked for, e.g.
// "config.json of org/name".
[[noreturn]] void fail_request(const HttpResult& result, const HubSettings& settings,
                               const std::string& repo_id, const std::string& what);

}  // namespace pagoda::hub
