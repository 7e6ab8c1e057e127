// The Hub's cache layout, as huggingface_hub writes it, so that files fetched by Python tools
// are found here and the other way round:
//   {cache}/models--{org}--{name}/blobs/{etag}                 the content, named by checksum
//   {cache}/models--{org}--{name}/blobs/{etag}.incomplete      a download under way (resumed)
//   {cache}/models--{org}--{name}/snapshots/{commit}/{path}    -> ../../blobs/{etag} (relative)
//   {cache}/models--{org}--{name}/refs/{revision}              the commit it pointed at
//   {cache}/.locks/models--{org}--{name}/{etag}.lock           flock()ed while a blob is fetched
// A blob appears only once complete and verified, and a snapshot path only links to such a
// blob: whatever a snapshot holds is whole.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace pagoda::hub {

class HubCache {
 public:
  HubCache(const std::string& cache_dir, const std::string& repo_id);

  const std::filesystem::path& repo_dir() const { return repo_dir_; }
  std::filesystem::path blob_path(const std::string& etag) const;
  std::filesystem::path incomplete_path(const std::string& etag) const;
  std::filesystem::path lock_path(const std::string& etag) const;
  std::filesystem::path snapshot_dir(const std::string& commit) const;

  // The commit refs/{revision} holds, if any.
  std::optional<std::string> read_ref(const std::string& revision) const;
  void write_ref(const std::string& revision, const std::string& commit) const;

  // snapshots/{commit}/{path} made a link to the blob (a copy where links are not supported),
  // replacing what was there.
  void link(const std::string& commit, const std::string& path, const std::string& etag) const;

  // The repo-relative paths under snapshots/{commit} that lead to a file ('/'-separated,
  // sorted); empty when there is no such snapshot.
  std::vector<std::string> snapshot_files(const std::string& commit) const;

 private:
  std::filesystem::path cache_dir_;
  std::string folder_;  // models--org--name
  std::filesystem::path repo_dir_;
};

// An exclusive flock() on a file (created if missing) until destroyed: two processes, Python's
// or ours, never write the same blob at once.
class FileLock {
 public:
  explicit FileLock(const std::filesystem::path& path);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace pagoda::hub
