// One large anonymous allocation (the KV cache pool, weight files copied off disk), backed by the
// biggest pages the system will give: explicit huge pages (MAP_HUGETLB), then transparent huge
// pages (madvise), then plain pages. Large pages cut TLB misses when attention walks gigabytes
// of KV blocks and when decode streams every weight. Pages are interleaved over NUMA nodes.
#pragma once

#include <cstddef>
#include <string_view>

#include "util/progress.h"

namespace pagoda {

enum class PageKind {
  kExplicitHuge,     // mmap(MAP_HUGETLB) from the reserved hugetlbfs pool
  kTransparentHuge,  // 2 MiB-aligned mapping with madvise(MADV_HUGEPAGE), THP enabled
  kPlain,            // ordinary 4 KiB pages
};

std::string_view page_kind_name(PageKind kind);

struct HugeBufferOptions {
  bool allow_explicit_huge = true;     // try MAP_HUGETLB first
  bool allow_transparent_huge = true;  // then THP via madvise
  // Fault every page in now instead of on first use, over a few threads; throws pagoda::Error if
  // the system cannot supply them all (the KV pool reserves its memory this way).
  bool prefault = false;
  // Advanced by the bytes faulted in (prefault only), for a progress bar; optional.
  Progress* progress = nullptr;
  // Spread the pages over all NUMA nodes (util/numa.h); a no-op on one node.
  bool interleave_numa_nodes = true;
};

// Move-only owner of the mapping; memory starts zeroed (anonymous mmap).
class HugeBuffer {
 public:
  HugeBuffer() = default;
  // Throws pagoda::Error if even plain pages cannot be mapped (size and errno in the message).
  static HugeBuffer allocate(size_t size_bytes, const HugeBufferOptions& options = {});

  ~HugeBuffer();
  HugeBuffer(HugeBuffer&& other) noexcept;
  HugeBuffer& operator=(HugeBuffer&& other) noexcept;
  HugeBuffer(const HugeBuffer&) = delete;
  HugeBuffer& operator=(const HugeBuffer&) = delete;

  void* data() const { return data_; }
  size_t size_bytes() const { return size_bytes_; }      // what the caller asked for
  size_t mapped_bytes() const { return mapped_bytes_; }  // rounded up to the page size used
  PageKind kind() const { return kind_; }
  std::string_view kind_name() const { return page_kind_name(kind_); }

 private:
  void release();

  void* data_ = nullptr;
  size_t size_bytes_ = 0;
  size_t mapped_bytes_ = 0;
  PageKind kind_ = PageKind::kPlain;
};

// Asks for transparent huge pages under the whole 2 MiB pages inside [data, data + bytes), for
// heap memory that will hold weights (quantized at load, repacked from GGUF). Call it before the
// memory is written: a fault then takes a huge page directly. No-op without THP.
void advise_huge_pages(void* data, size_t bytes);

// The system's default huge page size from /proc/meminfo ("Hugepagesize:"), 2 MiB if unknown.
size_t default_huge_page_bytes();

// True when /sys/kernel/mm/transparent_hugepage/enabled allows madvise-requested THP
// ("[always]" or "[madvise]").
bool transparent_huge_pages_available();

}  // namespace pagoda
