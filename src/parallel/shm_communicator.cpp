#include "parallel/shm_communicator.h"

#include <fcntl.h>
#include <numa.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <thread>

#include "util/error.h"
#include "util/half.h"

namespace pagoda {
namespace {

constexpr uint64_t kMagic = 0x50474453484d3031ull;  // "PGDSHM01"
constexpr size_t kPageBytes = 4096;
// Chunk boundaries of the reduce-scatter fall on 64-byte cache lines, so two ranks never write
// the same line of a slot.
constexpr size_t kChunkAlignBytes = 64;
constexpr size_t kTileElements = 1024;  // fp32 accumulator tile of the reduction, on the stack

size_t round_up(size_t n, size_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

template <typename T>
std::atomic_ref<T> atomic(T& word) {
  return std::atomic_ref<T>(word);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// A pid that no longer runs: gone, or a zombie its parent has not reaped yet (a forked rank
// whose parent is another rank, or the launcher still waiting on its other children).
bool process_is_dead(int pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;  // no procfs: trust kill()
  const size_t close = line.rfind(')');         // the command name may contain spaces
  return close != std::string::npos && close + 2 < line.size() &&
         (line[close + 2] == 'Z' || line[close + 2] == 'X');
}

float identity(float v) {
  return v;
}

// out[i] := sources[0][i] + sources[1][i] + ... in that order, summed in fp32 and narrowed once.
// out may be one of the sources: each tile is read in full before it is written.
template <typename Element, float (*widen)(Element), Element (*narrow)(float)>
void sum_in_rank_order(const Element* const* sources, int num_sources, Element* out, size_t n) {
  float acc[kTileElements];
  for (size_t tile = 0; tile < n; tile += kTileElements) {
    const size_t m = std::min(kTileElements, n - tile);
    for (size_t i = 0; i < m; ++i) acc[i] = widen(sources[0][tile + i]);
    for (int r = 1; r < num_sources; ++r) {
      const Element* src = sources[r] + tile;
      for (size_t i = 0; i < m; ++i) acc[i] += widen(src[i]);
    }
    for (size_t i = 0; i < m; ++i) out[tile + i] = narrow(acc[i]);
  }
}

template <typename Element, float (*widen)(Element), Element (*narrow)(float)>
void sum_slots(char* const* slots, int num_slots, int own, size_t begin, size_t end) {
  const Element* sources[ShmCommunicator::kMaxRanks];
  for (int r = 0; r < num_slots; ++r)
    sources[r] = reinterpret_cast<const Element*>(slots[r]) + begin;
  Element* out = reinterpret_cast<Element*>(slots[own]) + begin;
  sum_in_rank_order<Element, widen, narrow>(sources, num_slots, out, end - begin);
}

}  // namespace

// Lives at the start of the segment; every field that changes after creation is accessed
// through std::atomic_ref (lock-free on 32- and 64-bit words, so valid across processes).
struct alignas(64) ShmCommunicator::Header {
  uint64_t magic;  // written last by rank 0: the other fields are valid
  uint32_t world_size;
  uint64_t slot_bytes;
  uint32_t num_attached;  // world size + 1 once the last rank has unlinked the name
  uint32_t aborted;       // a rank gave up; the others stop at their next wait
  alignas(64) uint32_t barrier_count;
  alignas(64) uint32_t barrier_sense;
  alignas(64) int32_t pids[kMaxRanks];
};

std::string ShmCommunicator::segment_name(std::string_view job_id) {
  return "/pagoda-" + std::string(job_id);
}

ShmCommunicator::ShmCommunicator(const ShmCommunicatorOptions& options)
    : rank_(options.rank), world_size_(options.world_size), idle_sleep_(options.idle_sleep) {
  if (world_size_ < 1 || world_size_ > kMaxRanks) {
    fail("shared-memory communicator: world size {} is outside [1, {}]", world_size_, kMaxRanks);
  }
  if (rank_ < 0 || rank_ >= world_size_) {
    fail("shared-memory communicator: rank {} is outside [0, {})", rank_, world_size_);
  }
  const bool valid_id = !options.job_id.empty() && options.job_id.size() <= 200 &&
                        std::all_of(options.job_id.begin(), options.job_id.end(), [](char c) {
                          return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                                 (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
                        });
  if (!valid_id) {
    fail("shared-memory communicator: job id '{}' must be 1-200 letters, digits, '-', '_', '.'",
         options.job_id);
  }
  if (options.slot_bytes < 2 * kPageBytes) {
    fail("shared-memory communicator: slot of {} bytes is under the minimum {}", options.slot_bytes,
         2 * kPageBytes);
  }
  static_assert(sizeof(Header) <= kPageBytes);
  name_ = segment_name(options.job_id);
  half_bytes_ = round_up(options.slot_bytes, 2 * kPageBytes) / 2;
  mapped_bytes_ = kPageBytes + static_cast<size_t>(world_size_) * 2 * half_bytes_;
  attach(options);
}

ShmCommunicator::~ShmCommunicator() {
  if (base_ != nullptr) munmap(base_, mapped_bytes_);
}

void ShmCommunicator::attach(const ShmCommunicatorOptions& options) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + options.attach_timeout;
  const uint64_t slot_bytes = 2 * half_bytes_;

  int fd = -1;
  if (rank_ == 0) {
    fd = shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 && errno == EEXIST) {
      fail(
          "shared-memory segment /dev/shm{} exists: another job uses this id, or a crashed one "
          "left it behind (remove the file or choose another job id)",
          name_);
    }
    if (fd < 0) fail("shm_open {}: {}", name_, std::strerror(errno));
    if (ftruncate(fd, static_cast<off_t>(mapped_bytes_)) != 0) {
      const int error = errno;
      close(fd);
      shm_unlink(name_.c_str());
      fail("ftruncate {} to {} bytes: {}", name_, mapped_bytes_, std::strerror(error));
    }
  } else {
    // Rank 0 may not have created the segment yet, or not sized it yet.
    for (;;) {
      fd = shm_open(name_.c_str(), O_RDWR, 0600);
      if (fd >= 0) {
        // One fstat for both questions: rank 0 may size the segment between two calls, and a
        // second call then saw the full size after the first saw none, and refused a right size.
        struct stat st {};
        const bool sized = fstat(fd, &st) == 0;
        if (sized && static_cast<size_t>(st.st_size) == mapped_bytes_) break;
        if (sized && st.st_size != 0) {
          close(fd);
          fail(
              "shared-memory segment {} is {} bytes, this rank expects {}: the ranks disagree "
              "on world size or slot size",
              name_, static_cast<size_t>(st.st_size), mapped_bytes_);
        }
        close(fd);
      } else if (errno != ENOENT) {
        fail("shm_open {}: {}", name_, std::strerror(errno));
      }
      if (Clock::now() > deadline) {
        fail("rank {}: timed out waiting for rank 0 to create {}", rank_, name_);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  void* mapped = mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int map_error = errno;
  close(fd);
  if (mapped == MAP_FAILED) {
    if (rank_ == 0) shm_unlink(name_.c_str());
    fail("mmap {} ({} bytes): {}", name_, mapped_bytes_, std::strerror(map_error));
  }
  base_ = static_cast<char*>(mapped);
  header_ = reinterpret_cast<Header*>(base_);

  if (rank_ == 0) {
    header_->world_size = static_cast<uint32_t>(world_size_);
    header_->slot_bytes = slot_bytes;
    atomic(header_->magic).store(kMagic, std::memory_order_release);
  }
  try {
    wait_until([&] { return atomic(header_->magic).load(std::memory_order_acquire) == kMagic; },
               "attach", deadline);
    if (header_->world_size != static_cast<uint32_t>(world_size_) ||
        header_->slot_bytes != slot_bytes) {
      abort_group(fmt::format("rank {} expects world size {} and {}-byte slots; {} has {} and {}",
                              rank_, world_size_, slot_bytes, name_, header_->world_size,
                              header_->slot_bytes));
    }
    // Bind before the first touch, so the slot's pages are placed on this rank's node.
    if (options.numa_node >= 0 && numa_available() >= 0) {
      numa_run_on_node(options.numa_node);
      numa_set_preferred(options.numa_node);
    }
    std::memset(slot(rank_, 0), 0, slot_bytes);
    atomic(header_->pids[rank_]).store(static_cast<int32_t>(getpid()), std::memory_order_release);
    const uint32_t before = atomic(header_->num_attached).fetch_add(1, std::memory_order_acq_rel);
    // Everyone has the segment mapped now; the name is no longer needed. The last rank to attach
    // unlinks it and only then counts once more, so no rank leaves the attach with the name still
    // in /dev/shm (a rank started next under the same job id would otherwise join a dead group).
    const auto unlinked = static_cast<uint32_t>(world_size_) + 1;
    if (before + 1 == static_cast<uint32_t>(world_size_)) {
      shm_unlink(name_.c_str());
      atomic(header_->num_attached).fetch_add(1, std::memory_order_acq_rel);
    }
    wait_until(
        [&] { return atomic(header_->num_attached).load(std::memory_order_acquire) == unlinked; },
        "attach", deadline);
  } catch (...) {
    if (rank_ == 0) shm_unlink(name_.c_str());  // a no-op if the last rank already did
    munmap(base_, mapped_bytes_);
    base_ = nullptr;
    header_ = nullptr;
    throw;
  }
}

char* ShmCommunicator::slot(int r, int half) const {
  return base_ + kPageBytes +
         (static_cast<size_t>(r) * 2 + static_cast<size_t>(half)) * half_bytes_;
}

void ShmCommunicator::abort_group(const std::string& message) {
  broken_ = true;
  if (header_ != nullptr) atomic(header_->aborted).store(1, std::memory_order_release);
  throw Error(message);
}

void ShmCommunicator::check_usable(const char* what) const {
  if (broken_) fail("{}: rank {}'s shared-memory group has already failed", what, rank_);
}

template <typename Done>
void ShmCommunicator::wait_until(Done done, const char* what,
                                 std::chrono::steady_clock::time_point deadline) {
  using Clock = std::chrono::steady_clock;
  constexpr int kSpins = 4096;  // ~10-50 us of pause: the common case on dedicated cores
  for (int i = 0; i < kSpins; ++i) {
    if (done()) return;
    cpu_relax();
  }
  // Oversubscribed (or a slow peer): give the core away, and look at the peers now and then.
  Clock::time_point next_check = Clock::now() + std::chrono::milliseconds(100);
  const uint32_t check_every = idle_sleep_.count() > 0 ? 1u : 256u;
  for (uint32_t i = 0;; ++i) {
    if (done()) return;
    if (idle_sleep_.count() > 0) {
      std::this_thread::sleep_for(idle_sleep_);
    } else {
      std::this_thread::yield();
    }
    if (i % check_every != 0) continue;
    const Clock::time_point now = Clock::now();
    if (now < next_check) continue;
    next_check = now + std::chrono::milliseconds(100);
    if (atomic(header_->aborted).load(std::memory_order_acquire) != 0) {
      broken_ = true;
      fail("rank {}: another rank of {} failed during {}", rank_, name_, what);
    }
    for (int r = 0; r < world_size_; ++r) {
      const int32_t pid = atomic(header_->pids[r]).load(std::memory_order_acquire);
      if (r != rank_ && pid > 0 && process_is_dead(pid)) {
        // A rank that finished its last collective and exited released us on its way out:
        // look again now that its exit (and so its last store) is visible.
        if (done()) return;
        // The segment names the group: a rank of several groups (pipeline stages) numbers its
        // peers differently in each.
        abort_group(fmt::format("rank {}: rank {} (pid {}) exited during {} on {}", rank_, r, pid,
                                what, name_));
      }
    }
    if (now > deadline) {
      abort_group(fmt::format("rank {}: timed out during {} on {}", rank_, what, name_));
    }
  }
}

// Sense reversal: the last rank to arrive resets the count and flips the shared sense; the
// others wait for the flip. The count is reset before the flip is published, so a fast rank
// entering the next barrier always finds it at zero.
void ShmCommunicator::barrier() {
  check_usable("barrier");
  if (world_size_ == 1) return;
  local_sense_ ^= 1u;
  const uint32_t arrived = atomic(header_->barrier_count).fetch_add(1, std::memory_order_acq_rel);
  if (arrived + 1 == static_cast<uint32_t>(world_size_)) {
    atomic(header_->barrier_count).store(0, std::memory_order_relaxed);
    atomic(header_->barrier_sense).store(local_sense_, std::memory_order_release);
  } else {
    wait_until(
        [&] {
          return atomic(header_->barrier_sense).load(std::memory_order_acquire) == local_sense_;
        },
        "barrier");
  }
}

// Sums elements [begin, end) of every rank's slot half, in rank order, into this rank's slot.
void ShmCommunicator::reduce_chunk(int half, size_t begin, size_t end, DType dtype) {
  if (end <= begin) return;
  char* slots[kMaxRanks];
  for (int r = 0; r < world_size_; ++r) slots[r] = slot(r, half);
  switch (dtype) {
    case DType::kBF16:
      sum_slots<bf16_t, bf16_to_f32, f32_to_bf16>(slots, world_size_, rank_, begin, end);
      break;
    case DType::kF16:
      sum_slots<f16_t, f16_to_f32, f32_to_f16>(slots, world_size_, rank_, begin, end);
      break;
    default:
      sum_slots<float, identity, identity>(slots, world_size_, rank_, begin, end);
  }
}

void ShmCommunicator::all_reduce_sum(void* data, size_t count, DType dtype) {
  check_reduce_dtype(dtype);
  check_usable("all_reduce_sum");
  if (world_size_ == 1) return;
  const size_t element_bytes = static_cast<size_t>(dtype_size(dtype));
  const size_t align_elements = kChunkAlignBytes / element_bytes;
  const size_t piece_elements = half_bytes_ / element_bytes;
  char* bytes = static_cast<char*>(data);
  for (size_t offset = 0; offset < count; offset += piece_elements) {
    const size_t n = std::min(piece_elements, count - offset);
    char* piece = bytes + offset * element_bytes;
    const int half = next_half();
    std::memcpy(slot(rank_, half), piece, n * element_bytes);
    barrier();
    // Chunk r of the piece is rank r's to sum; the last ranks get less (or nothing) when n
    // does not divide evenly.
    const size_t chunk = round_up((n + world_size_ - 1) / world_size_, align_elements);
    const size_t begin = std::min(n, static_cast<size_t>(rank_) * chunk);
    reduce_chunk(half, begin, std::min(n, begin + chunk), dtype);
    barrier();
    for (int r = 0; r < world_size_; ++r) {
      const size_t b = std::min(n, static_cast<size_t>(r) * chunk);
      const size_t e = std::min(n, b + chunk);
      if (e > b) {
        std::memcpy(piece + b * element_bytes, slot(r, half) + b * element_bytes,
                    (e - b) * element_bytes);
      }
    }
  }
}

void ShmCommunicator::all_gather(const void* send, void* recv, size_t bytes_per_rank) {
  check_usable("all_gather");
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  if (world_size_ == 1) {
    if (bytes_per_rank > 0) std::memcpy(out, in, bytes_per_rank);
    return;
  }
  for (size_t offset = 0; offset < bytes_per_rank; offset += half_bytes_) {
    const size_t n = std::min(half_bytes_, bytes_per_rank - offset);
    const int half = next_half();
    std::memcpy(slot(rank_, half), in + offset, n);
    barrier();
    for (int r = 0; r < world_size_; ++r) {
      std::memcpy(out + static_cast<size_t>(r) * bytes_per_rank + offset, slot(r, half), n);
    }
  }
}

void ShmCommunicator::broadcast(void* data, size_t bytes, int root) {
  check_root(root, world_size_);
  check_usable("broadcast");
  if (world_size_ == 1) return;
  char* buffer = static_cast<char*>(data);
  for (size_t offset = 0; offset < bytes; offset += half_bytes_) {
    const size_t n = std::min(half_bytes_, bytes - offset);
    const int half = next_half();
    if (rank_ == root) std::memcpy(slot(root, half), buffer + offset, n);
    barrier();
    if (rank_ != root) std::memcpy(buffer + offset, slot(root, half), n);
  }
}

}  // namespace pagoda
