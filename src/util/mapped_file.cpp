#include "util/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "util/error.h"

namespace pagoda {
namespace {

// Closes the descriptor on every way out of the constructor.
struct FileDescriptor {
  int fd = -1;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};

// Reads in pieces of this size so that progress moves while a multi-GB shard is read.
constexpr size_t kReadChunkBytes = size_t{64} << 20;

void read_all(int fd, const std::string& path, uint8_t* dst, size_t size, Progress* progress) {
  size_t done = 0;
  while (done < size) {
    const size_t want = std::min(size - done, kReadChunkBytes);
    const ssize_t n = ::pread(fd, dst + done, want, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("{}: cannot read: {}", path, std::strerror(errno));
    if (n == 0) fail("{}: file shrank while being read ({} of {} bytes)", path, done, size);
    done += static_cast<size_t>(n);
    if (progress != nullptr) progress->advance(static_cast<uint64_t>(n));
  }
}

}  // namespace

FileMemory parse_file_memory(std::string_view name) {
  if (name == "mmap") return FileMemory::kMap;
  if (name == "huge-pages") return FileMemory::kHugePageCopy;
  fail("weights memory must be 'mmap' or 'huge-pages', got '{}'", name);
}

const char* file_memory_name(FileMemory memory) {
  return memory == FileMemory::kMap ? "mmap" : "huge-pages";
}

MappedFile::MappedFile(const std::string& path, FileMemory memory, Progress* progress)
    : path_(path) {
  FileDescriptor file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(file.fd, &st) != 0) fail("{}: cannot stat: {}", path, std::strerror(errno));
  size_ = static_cast<size_t>(st.st_size);
  if (size_ == 0) return;
  if (memory == FileMemory::kHugePageCopy) {
    copy_ = HugeBuffer::allocate(size_);
    read_all(file.fd, path, static_cast<uint8_t*>(copy_.data()), size_, progress);
    data_ = static_cast<const uint8_t*>(copy_.data());
    return;
  }
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, file.fd, 0);
  if (p == MAP_FAILED) fail("{}: cannot map: {}", path, std::strerror(errno));
  data_ = static_cast<const uint8_t*>(p);
  mapped_ = true;
}

MappedFile::MappedFile(std::string path, HugeBuffer bytes, size_t size)
    : path_(std::move(path)), size_(size), copy_(std::move(bytes)) {
  data_ = static_cast<const uint8_t*>(copy_.data());
}

size_t MappedFile::drop_pages(const uint8_t* begin, const uint8_t* end) const {
  if (!mapped_ || data_ == nullptr) return 0;
  begin = std::max(begin, data_);
  end = std::min(end, data_ + size_);
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t first = (reinterpret_cast<uintptr_t>(begin) + page - 1) / page * page;
  const uintptr_t last = reinterpret_cast<uintptr_t>(end) / page * page;
  if (last <= first) return 0;
  // Advice only: on failure the pages simply stay resident.
  if (::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED) != 0) return 0;
  return last - first;
}

MappedFile::~MappedFile() {
  if (mapped_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

std::string_view MappedFile::memory_name() const {
  return mapped_ || data_ == nullptr ? "file map" : copy_.kind_name();
}

}  // namespace pagoda
