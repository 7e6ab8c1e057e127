// The Hub's cache layout; see hub_cache.h.
#include "hub/hub_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "util/error.h"

namespace pagoda::hub {

namespace fs = std::filesystem;

namespace {

// Writes `text` to a temporary file beside `path` and renames it over `path`, so that a reader
// sees the old content or the new, never half.
void write_atomically(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  const fs::path tmp = path.string() + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) fail("{}: cannot write ({})", tmp.string(), std::strerror(errno));
  }
  fs::rename(tmp, path);
}

}  // namespace

HubCache::HubCache(const std::string& cache_dir, const std::string& repo_id)
    : cache_dir_(cache_dir) {
  folder_ = "models--";
  for (const char c : repo_id) folder_ += c == '/' ? std::string("--") : std::string(1, c);
  repo_dir_ = cache_dir_ / folder_;
}

fs::path HubCache::blob_path(const std::string& etag) const {
  return repo_dir_ / "blobs" / etag;
}

fs::path HubCache::incomplete_path(const std::string& etag) const {
  return repo_dir_ / "blobs" / (etag + ".incomplete");
}

fs::path HubCache::lock_path(const std::string& etag) const {
  return cache_dir_ / ".locks" / folder_ / (etag + ".lock");
}

fs::path HubCache::snapshot_dir(const std::string& commit) const {
  return repo_dir_ / "snapshots" / commit;
}

std::optional<std::string> HubCache::read_ref(const std::string& revision) const {
  std::ifstream in(repo_dir_ / "refs" / revision);
  if (!in) return std::nullopt;
  std::string commit;
  std::getline(in, commit);
  while (!commit.empty() && std::isspace(static_cast<unsigned char>(commit.back())))
    commit.pop_back();
  if (commit.empty()) return std::nullopt;
  return commit;
}

void HubCache::write_ref(const std::string& revision, const std::string& commit) const {
  // huggingface_hub writes the bare commit, no newline.
  write_atomically(repo_dir_ / "refs" / revision, commit);
}

void HubCache::link(const std::string& commit, const std::string& path,
                    const std::string& etag) const {
  const fs::path target_path = snapshot_dir(commit) / path;
  fs::create_directories(target_path.parent_path());
  // Relative, as huggingface_hub links: the cache stays valid when moved.
  std::string relative;
  const size_t depth = static_cast<size_t>(std::count(path.begin(), path.end(), '/'));
  for (size_t i = 0; i < depth + 2; ++i) relative += "../";
  relative += "blobs/" + etag;
  const fs::path tmp = target_path.string() + ".tmp" + std::to_string(::getpid());
  std::error_code ec;
  fs::remove(tmp, ec);
  fs::create_symlink(relative, tmp, ec);
  if (ec) {
    // A file system without symbolic links: a copy, as huggingface_hub does on such systems.
    fs::copy_file(blob_path(etag), tmp, fs::copy_options::overwrite_existing);
  }
  fs::rename(tmp, target_path);
}

std::vector<std::string> HubCache::snapshot_files(const std::string& commit) const {
  std::vector<std::string> files;
  const fs::path dir = snapshot_dir(commit);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return files;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    // is_regular_file follows the link: a link to a missing blob does not count.
    if (fs::is_regular_file(it->path(), ec)) {
      files.push_back(it->path().lexically_relative(dir).generic_string());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

FileLock::FileLock(const fs::path& path) {
  fs::create_directories(path.parent_path());
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("{}: cannot open lock file ({})", path.string(), std::strerror(errno));
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno != EINTR) fail("{}: cannot lock ({})", path.string(), std::strerror(errno));
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the lock
}

}  // namespace pagoda::hub
