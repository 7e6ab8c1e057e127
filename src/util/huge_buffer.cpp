// HugeBuffer: the fallback chain explicit huge pages -> transparent huge pages -> plain pages.
#include "util/huge_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "util/error.h"
#include "util/numa.h"

namespace pagoda {

namespace {

constexpr size_t kFallbackHugePageBytes = size_t{2} << 20;
// Zeroing fresh pages saturates a socket's memory bandwidth with a few cores.
constexpr size_t kMostPopulateThreads = 8;
constexpr size_t kPopulateChunkBytes = size_t{128} << 20;

size_t round_up(size_t value, size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

void* map_anonymous(size_t bytes, int extra_flags) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | extra_flags,
                 -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

// Maps `bytes` starting on a `alignment` boundary by over-mapping and trimming both ends, so
// THP can back the whole range with aligned huge pages.
void* map_aligned(size_t bytes, size_t alignment) {
  const size_t padded = bytes + alignment;
  auto* raw = static_cast<uint8_t*>(map_anonymous(padded, 0));
  if (raw == nullptr) return nullptr;
  const auto address = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (address + alignment - 1) / alignment * alignment;
  const size_t head = aligned - address;
  const size_t tail = padded - head - bytes;
  if (head > 0) munmap(raw, head);
  if (tail > 0) munmap(raw + head + bytes, tail);
  return reinterpret_cast<void*>(aligned);
}

// Faults in [data, data + bytes) of a fresh mapping. MADV_POPULATE_WRITE (Linux 5.14) lets the
// kernel allocate and zero the pages in one call per range, and reports a shortfall as ENOMEM
// instead of the OOM killer finding it later, mid-request. Older kernels answer EINVAL; then each
// page gets one written byte, which is as good because the mapping is fresh and all zeros.
// Zeroing runs at memory bandwidth on one core, so the range is split over a few threads, on
// whole pages of `page_bytes` so that no huge page is split between two of them.
void populate_pages(void* data, size_t bytes, size_t page_bytes, Progress* progress) {
  // Each thread faults its range in pieces of whole pages, so that progress moves.
  const size_t chunk_bytes = std::max<size_t>(1, kPopulateChunkBytes / page_bytes) * page_bytes;
  const size_t pages = (bytes + page_bytes - 1) / page_bytes;
  const size_t cores = std::max(1u, std::thread::hardware_concurrency());
  const size_t num_threads = std::min({cores, kMostPopulateThreads, pages});
  const size_t pages_per_thread = (pages + num_threads - 1) / num_threads;
  std::vector<int> errors(num_threads, 0);
  auto populate = [&](size_t t) {
    const size_t begin = std::min(bytes, t * pages_per_thread * page_bytes);
    const size_t end = std::min(bytes, (t + 1) * pages_per_thread * page_bytes);
    if (end == begin) return;
    for (size_t chunk = begin; chunk < end; chunk += chunk_bytes) {
      auto* p = static_cast<uint8_t*>(data) + chunk;
      const size_t length = std::min(chunk_bytes, end - chunk);
      if (madvise(p, length, MADV_POPULATE_WRITE) != 0) {
        if (errno != EINVAL) {
          errors[t] = errno;
          return;
        }
        auto* touch = static_cast<volatile uint8_t*>(p);
        for (size_t offset = 0; offset < length; offset += page_bytes) touch[offset] = 0;
      }
      if (progress != nullptr) progress->advance(length);
    }
  };
  {
    std::vector<std::jthread> threads;
    for (size_t t = 1; t < num_threads; ++t) threads.emplace_back(populate, t);
    populate(0);
  }
  for (int error : errors) {
    if (error != 0) {
      fail("HugeBuffer: cannot reserve {} bytes up front: {}", bytes, std::strerror(error));
    }
  }
}

}  // namespace

std::string_view page_kind_name(PageKind kind) {
  switch (kind) {
    case PageKind::kExplicitHuge:
      return "explicit huge pages";
    case PageKind::kTransparentHuge:
      return "transparent huge pages";
    case PageKind::kPlain:
      return "plain pages";
  }
  return "unknown";
}

size_t default_huge_page_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    if (line.rfind("Hugepagesize:", 0) != 0) continue;
    std::istringstream fields(line.substr(std::strlen("Hugepagesize:")));
    size_t kib = 0;
    if (fields >> kib && kib > 0) return kib * 1024;
  }
  return kFallbackHugePageBytes;
}

bool transparent_huge_pages_available() {
  std::ifstream file("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes;
  std::getline(file, modes);
  return modes.find("[always]") != std::string::npos ||
         modes.find("[madvise]") != std::string::npos;
}

void advise_huge_pages(void* data, size_t bytes) {
  static const bool available = transparent_huge_pages_available();
  if (!available || data == nullptr) return;
  const size_t huge_page = default_huge_page_bytes();
  const auto begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t first = (begin + huge_page - 1) / huge_page * huge_page;
  const uintptr_t last = (begin + bytes) / huge_page * huge_page;
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
}

HugeBuffer HugeBuffer::allocate(size_t size_bytes, const HugeBufferOptions& options) {
  if (size_bytes == 0) fail("HugeBuffer: cannot allocate 0 bytes");
  HugeBuffer buffer;
  buffer.size_bytes_ = size_bytes;
  const size_t huge_page = default_huge_page_bytes();

  if (options.allow_explicit_huge) {
    // Without MAP_NORESERVE the kernel reserves the huge pages now, so a short pool fails here
    // with ENOMEM instead of SIGBUS on first touch.
    const size_t bytes = round_up(size_bytes, huge_page);
    if (void* p = map_anonymous(bytes, MAP_HUGETLB)) {
      buffer.data_ = p;
      buffer.mapped_bytes_ = bytes;
      buffer.kind_ = PageKind::kExplicitHuge;
    }
  }
  if (buffer.data_ == nullptr && options.allow_transparent_huge &&
      transparent_huge_pages_available()) {
    const size_t bytes = round_up(size_bytes, huge_page);
    if (void* p = map_aligned(bytes, huge_page)) {
      if (madvise(p, bytes, MADV_HUGEPAGE) == 0) {
        buffer.data_ = p;
        buffer.mapped_bytes_ = bytes;
        buffer.kind_ = PageKind::kTransparentHuge;
      } else {
        munmap(p, bytes);
      }
    }
  }
  if (buffer.data_ == nullptr) {
    const size_t bytes = round_up(size_bytes, static_cast<size_t>(sysconf(_SC_PAGESIZE)));
    void* p = map_anonymous(bytes, 0);
    if (p == nullptr) {
      fail("HugeBuffer: mmap of {} bytes failed: {}", bytes, std::strerror(errno));
    }
    buffer.data_ = p;
    buffer.mapped_bytes_ = bytes;
    buffer.kind_ = PageKind::kPlain;
  }
  if (options.interleave_numa_nodes) interleave_over_numa_nodes(buffer.data_, buffer.mapped_bytes_);
  if (options.prefault) {
    const size_t page_bytes =
        buffer.kind_ == PageKind::kPlain ? static_cast<size_t>(sysconf(_SC_PAGESIZE)) : huge_page;
    if (options.progress != nullptr) options.progress->set_total(buffer.mapped_bytes_);
    populate_pages(buffer.data_, buffer.mapped_bytes_, page_bytes, options.progress);
  }
  return buffer;
}

HugeBuffer::~HugeBuffer() {
  release();
}

HugeBuffer::HugeBuffer(HugeBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_bytes_(std::exchange(other.size_bytes_, 0)),
      mapped_bytes_(std::exchange(other.mapped_bytes_, 0)),
      kind_(other.kind_) {}

HugeBuffer& HugeBuffer::operator=(HugeBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_bytes_ = std::exchange(other.size_bytes_, 0);
    mapped_bytes_ = std::exchange(other.mapped_bytes_, 0);
    kind_ = other.kind_;
  }
  return *this;
}

void HugeBuffer::release() {
  if (data_ != nullptr) munmap(data_, mapped_bytes_);
  data_ = nullptr;
  size_bytes_ = 0;
  mapped_bytes_ = 0;
}

}  // namespace pagoda
