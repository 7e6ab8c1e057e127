// Parallel, resumable, verified downloads into the cache; see downloader.h.
#include "hub/downloader.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "hub/checksum.h"
#include "hub/http_client.h"
#include "util/error.h"
#include "util/progress.h"
#include "util/units.h"

namespace pagoda::hub {
namespace {

namespace fs = std::filesystem;

uint64_t size_or_zero(const fs::path& path) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  return ec ? 0 : static_cast<uint64_t>(size);
}

// Progress shown whatever --log-level says (a download of minutes needs it), unless
// HF_HUB_DISABLE_PROGRESS_BARS is set as for Python tools, or logging is off.
ProgressOptions download_progress_options() {
  ProgressOptions o;
  o.terminal = ::isatty(STDERR_FILENO) != 0;
  const char* disable = std::getenv("HF_HUB_DISABLE_PROGRESS_BARS");
  const bool silent = (disable != nullptr && std::string(disable) != "0" && *disable != '\0') ||
                      !spdlog::should_log(spdlog::level::warn);
  o.write_line = [silent](std::string_view text) {
    if (!silent) std::fprintf(stderr, "%.*s\n", static_cast<int>(text.size()), text.data());
  };
  o.write_bar = [silent](std::string_view text) {
    if (silent) return;
    std::fwrite(text.data(), 1, text.size(), stderr);
    std::fflush(stderr);
  };
  return o;
}

// Sleeps `seconds`, waking early when `cancel` is set.
void pause(double seconds, const std::atomic<bool>& cancel) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!cancel.load() && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// The checksum of the first bytes already on disk, so that a resumed download is checked whole.
void hash_existing(const fs::path& path, uint64_t bytes, ContentChecksum& checksum) {
  std::FILE* in = std::fopen(path.c_str(), "rb");
  if (in == nullptr) fail("{}: cannot read ({})", path.string(), std::strerror(errno));
  std::string buffer(1 << 20, '\0');
  while (bytes > 0) {
    const size_t n = std::fread(buffer.data(), 1, std::min<uint64_t>(bytes, buffer.size()), in);
    if (n == 0) break;
    checksum.update(std::string_view(buffer.data(), n));
    bytes -= n;
  }
  std::fclose(in);
}

bool transient(const HttpResult& r) {
  if (r.error == TransportError::kConnect || r.error == TransportError::kInterrupted) return true;
  return r.error == TransportError::kNone && (r.status >= 500 || r.status == 429);
}

// One file's way from the server into blobs/.
class BlobFetch {
 public:
  BlobFetch(const HubSettings& settings, const RepoInfo& info, const RepoFile& file,
            const HubCache& cache, Progress& progress, const std::atomic<bool>& cancel)
      : settings_(settings),
        info_(info),
        file_(file),
        cache_(cache),
        progress_(progress),
        cancel_(cancel),
        blob_(cache.blob_path(file.etag())),
        partial_(cache.incomplete_path(file.etag())) {}

  void run(HttpClient& http) {
    const FileLock lock(cache_.lock_path(file_.etag()));
    if (fs::exists(blob_)) {  // another process fetched it while we waited for the lock
      progress_.advance(file_.size - std::min(file_.size, size_or_zero(partial_)));
      return;
    }
    const std::string url = file_url(settings_, info_, file_.path);
    ContentChecksum checksum(file_);
    for (int attempt = 1;; ++attempt) {
      if (cancel_.load()) return;
      uint64_t offset = size_or_zero(partial_);
      if (offset > file_.size) {  // not a prefix of this file: start over
        fs::remove(partial_);
        offset = 0;
      }
      checksum.reset();
      if (offset > 0) hash_existing(partial_, offset, checksum);
      if (offset == file_.size) break;  // complete already: only the check remains
      const HttpResult result = fetch_from(http, url, offset, checksum);
      if (result.error == TransportError::kNone && (result.status == 200 || result.status == 206))
        break;
      if (result.error == TransportError::kAborted) return;
      if (result.error == TransportError::kWrite) {
        fail("writing {} failed ({}); the part fetched so far is kept for the next run",
             partial_.string(), write_error_.empty() ? result.error_text : write_error_);
      }
      if (result.status == 416) {  // the part on disk does not fit the server's file
        fs::remove(partial_);
      } else if (!transient(result) || attempt >= settings_.max_attempts) {
        fail_request(result, settings_, info_.repo_id, file_.path);
      }
      const double delay = settings_.retry_delay_s * std::pow(2.0, attempt - 1);
      spdlog::warn("{} of {}: {} (attempt {} of {}); resuming in {:.1f} s", file_.path,
                   info_.repo_id,
                   result.error != TransportError::kNone ? result.error_text
                                                         : fmt::format("HTTP {}", result.status),
                   attempt, settings_.max_attempts, delay);
      pause(delay, cancel_);
    }
    verify_and_keep(checksum);
  }

 private:
  // One GET from `offset`, appended to the partial file.
  HttpResult fetch_from(HttpClient& http, const std::string& url, uint64_t offset,
                        ContentChecksum& checksum) {
    std::FILE* out = std::fopen(partial_.c_str(), offset > 0 ? "ab" : "wb");
    if (out == nullptr) {
      fail("{}: cannot create ({})", partial_.string(), std::strerror(errno));
    }
    bool first = true;
    const HttpClient::Sink sink = [&](std::string_view bytes, long status) {
      if (first && status == 200 && offset > 0) {
        // The server sent the whole file instead of the range: start the part over.
        if (std::fflush(out) != 0 || ::ftruncate(::fileno(out), 0) != 0) return false;
        std::rewind(out);
        checksum.reset();
      }
      first = false;
      if (std::fwrite(bytes.data(), 1, bytes.size(), out) != bytes.size()) {
        write_error_ = std::strerror(errno);
        return false;
      }
      checksum.update(bytes);
      progress_.advance(bytes.size());
      return true;
    };
    HttpResult result = http.stream(url, offset, sink);
    // The data must be on disk before the blob is renamed into place.
    const bool flushed = std::fflush(out) == 0 && ::fdatasync(::fileno(out)) == 0;
    if (!flushed && write_error_.empty()) write_error_ = std::strerror(errno);
    std::fclose(out);
    if (!flushed && result.error == TransportError::kNone) result.error = TransportError::kWrite;
    return result;
  }

  void verify_and_keep(ContentChecksum& checksum) {
    const uint64_t size = size_or_zero(partial_);
    const std::string actual = checksum.hex();
    if (size != file_.size || actual != checksum.expected()) {
      fs::remove(partial_);
      fail(
          "checksum mismatch for {} of {}: expected {} {} ({} bytes), got {} ({} bytes); the "
          "download was deleted and nothing was added to the cache. Run again to fetch it anew; "
          "if it fails again, the server or a proxy alters the file",
          file_.path, info_.repo_id, checksum.kind(), checksum.expected(), file_.size, actual,
          size);
    }
    fs::rename(partial_, blob_);
  }

  const HubSettings& settings_;
  const RepoInfo& info_;
  const RepoFile& file_;
  const HubCache& cache_;
  Progress& progress_;
  const std::atomic<bool>& cancel_;
  fs::path blob_, partial_;
  std::string write_error_;
};

void check_free_space(const fs::path& dir, uint64_t needed, const std::string& repo_id) {
  struct statvfs fs_info {};
  if (::statvfs(dir.c_str(), &fs_info) != 0) return;  // unknown: the writes will tell
  const uint64_t free_bytes = static_cast<uint64_t>(fs_info.f_bavail) * fs_info.f_frsize;
  if (needed > free_bytes) {
    fail(
        "not enough disk space for {}: {} to download into {}, {} free. Free some space, or "
        "download elsewhere with --download-dir DIR (or HF_HUB_CACHE)",
        repo_id, format_bytes(needed), dir.string(), format_bytes(free_bytes));
  }
}

}  // namespace

void download_files(const HubSettings& settings, const RepoInfo& info,
                    const std::vector<RepoFile>& files, const HubCache& cache) {
  std::vector<const RepoFile*> missing;
  uint64_t to_fetch = 0;
  for (const RepoFile& f : files) {
    if (fs::exists(cache.blob_path(f.etag()))) continue;
    // Two paths with the same content share one blob: fetch it once.
    bool seen = false;
    for (const RepoFile* m : missing) seen = seen || m->etag() == f.etag();
    if (seen) continue;
    missing.push_back(&f);
    to_fetch += f.size - std::min(f.size, size_or_zero(cache.incomplete_path(f.etag())));
  }
  if (!missing.empty()) {
    const fs::path blobs = cache.repo_dir() / "blobs";
    fs::create_directories(blobs);
    check_free_space(blobs, to_fetch, info.repo_id);
    const ProgressOptions progress_options = download_progress_options();
    // Said as the progress is shown, whatever the log level: a download is worth knowing of.
    progress_options.write_line(fmt::format("fetching {} file(s) of {} ({}) from {} into {}",
                                            missing.size(), info.repo_id, format_bytes(to_fetch),
                                            settings.endpoint, cache.repo_dir().string()));
    Progress progress("downloading " + info.repo_id, to_fetch, progress_options);
    std::atomic<bool> cancel{false};
    std::atomic<size_t> next{0};
    std::mutex error_mutex;
    std::exception_ptr first_error;
    const auto worker = [&] {
      HttpClient http(settings.token, &cancel);
      for (size_t i = next++; i < missing.size() && !cancel.load(); i = next++) {
        try {
          BlobFetch(settings, info, *missing[i], cache, progress, cancel).run(http);
        } catch (...) {
          const std::lock_guard lock(error_mutex);
          if (!first_error) first_error = std::current_exception();
          cancel = true;  // the others stop; their parts stay for the next run
        }
      }
    };
    const size_t num_threads =
        std::min<size_t>(missing.size(), static_cast<size_t>(std::max(1, settings.num_workers)));
    std::vector<std::thread> threads;
    for (size_t t = 0; t < num_threads; ++t) threads.emplace_back(worker);
    for (std::thread& t : threads) t.join();
    progress.finish();
    if (first_error) std::rethrow_exception(first_error);
  }
  for (const RepoFile& f : files) cache.link(info.commit, f.path, f.etag());
}

}  // namespace pagoda::hub
