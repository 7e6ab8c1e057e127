// A whole file's bytes in memory, read-only: weights are used in place, never parsed into copies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "util/huge_buffer.h"
#include "util/progress.h"

namespace pagoda {

// How a weights file gets into memory. A map starts instantly and shares the page cache with
// other processes, but its 4 KiB pages cost a TLB miss every few KiB of a decode step's
// streaming read; a copy into huge pages (util/huge_buffer.h) reads the whole file at startup
// and then streams with ~500× fewer page walks. `pagoda serve --weights-memory` chooses.
enum class FileMemory {
  kMap,           // mmap(MAP_PRIVATE) of the file
  kHugePageCopy,  // read into a HugeBuffer (explicit, then transparent huge pages)
};

// "mmap" / "huge-pages"; throws pagoda::Error naming the accepted values otherwise.
FileMemory parse_file_memory(std::string_view name);
// The name parse_file_memory takes for `memory` (for logs).
const char* file_memory_name(FileMemory memory);

class MappedFile {
 public:
  // Throws pagoda::Error naming the path if it cannot be opened, mapped or read. A copy
  // advances `progress` (if given) by the bytes read.
  explicit MappedFile(const std::string& path, FileMemory memory = FileMemory::kMap,
                      Progress* progress = nullptr);
  // A file's bytes that are already in memory (a decrypted weight file): `bytes` holds the
  // `size` bytes of `path`'s content.
  MappedFile(std::string path, HugeBuffer bytes, size_t size);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // "file map", or the kind of pages the copy got (see HugeBuffer::kind_name).
  std::string_view memory_name() const;

  // Drops the whole pages inside [begin, end) from this process's resident memory, for bytes a
  // converter has read for the last time (an FP8 matrix once it is int8). Only a file map does
  // it: its pages come back from the file if touched again, where a copy would lose its bytes.
  // Returns the bytes dropped; bytes outside this file are ignored.
  size_t drop_pages(const uint8_t* begin, const uint8_t* end) const;
  // True when [begin, end) lies in this file's map (so drop_pages can drop it).
  bool maps(const uint8_t* begin, const uint8_t* end) const {
    return mapped_ && begin >= data_ && end <= data_ + size_;
  }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;  // data_ is an mmap of the file (else it is copy_'s)
  HugeBuffer copy_;
};

}  // namespace pagoda
