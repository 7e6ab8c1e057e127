// Ranks on one machine (one per NUMA node, say) that share a POSIX shared-memory segment.
//
// Layout of the segment /dev/shm/pagoda-<job_id>:
//   [header: configuration, attach count, barrier words, rank pids]  one page
//   [slot of rank 0][slot of rank 1]...                               slot_bytes each
// Each slot is two halves used by alternate collectives, so a collective may fill its half while
// a slower rank still reads the other half from the collective before: two barriers per
// all-reduce piece and one per gather or broadcast piece. Each rank writes its own slot first,
// so under Linux's first-touch policy the slot's pages sit on that rank's NUMA node; other
// ranks only read it.
//
// All-reduce is reduce-scatter then all-gather over the slots (what SGLang's CPU backend and
// NCCL's ring do in spirit): every rank copies its input into its slot; rank r sums chunk r of
// every slot in rank order, in fp32, and writes the sum into chunk r of its own slot; then every
// rank copies every chunk out. Each rank reads (W-1)/W of the data once, and the summation order
// is fixed, so every rank gets the same bits and a run repeats exactly.
//
// Lifetime: rank 0 creates the segment (failing if the name is taken), the others open it; the
// last rank to attach unlinks the name, so once a group is formed nothing is left in /dev/shm
// even if every rank is killed. A rank that dies leaves the others waiting on a barrier; they
// notice (its pid is gone or a zombie) within ~100 ms and throw instead of hanging.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "parallel/communicator.h"

namespace pagoda {

struct ShmCommunicatorOptions {
  // Names the segment; unique per launch (a launcher's pid and start time, a UUID). Letters,
  // digits, '-', '_' and '.' only.
  std::string job_id;
  int rank = 0;
  int world_size = 1;
  // Bytes of each rank's slot; larger collectives go through in pieces of slot_bytes / 2.
  size_t slot_bytes = size_t{8} << 20;
  // How long ranks wait for each other to attach before giving up.
  std::chrono::milliseconds attach_timeout{30000};
  // When >= 0: run this rank on that NUMA node and prefer its memory, before the slot is first
  // touched. Leave at -1 when the launcher binds the process (numactl, mpirun --bind-to).
  int numa_node = -1;
  // Once a wait has spun ~10-50 us: 0 yields the core between looks (a peer is expected soon:
  // the collectives inside a forward pass); above 0 sleeps that long instead, for a group whose
  // waits last as long as a peer's whole stage of work (pipeline links), so that a waiting
  // sender thread leaves its core to the rank's compute threads.
  std::chrono::microseconds idle_sleep{0};
};

class ShmCommunicator final : public Communicator {
 public:
  static constexpr int kMaxRanks = 256;

  // Attaches to the group; returns once all world_size ranks have attached. Throws Error on a
  // taken name, mismatched options, a timeout or a rank that died while attaching.
  explicit ShmCommunicator(const ShmCommunicatorOptions& options);
  ~ShmCommunicator() override;
  ShmCommunicator(const ShmCommunicator&) = delete;
  ShmCommunicator& operator=(const ShmCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  void all_reduce_sum(void* data, size_t count, DType dtype) override;
  void all_gather(const void* send, void* recv, size_t bytes_per_rank) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void barrier() override;

  // "/pagoda-<job_id>", the name passed to shm_open.
  static std::string segment_name(std::string_view job_id);

 private:
  struct Header;

  void attach(const ShmCommunicatorOptions& options);
  // Spins, then yields, until done(); checks every ~100 ms that the other ranks are alive and
  // that none has given up, and throws (marking the group aborted) if not.
  template <typename Done>
  void wait_until(Done done, const char* what,
                  std::chrono::steady_clock::time_point deadline =
                      std::chrono::steady_clock::time_point::max());
  [[noreturn]] void abort_group(const std::string& message);
  void check_usable(const char* what) const;
  // This collective's half of rank r's slot.
  char* slot(int r, int half) const;
  int next_half() { return static_cast<int>(sequence_++ & 1u); }
  void reduce_chunk(int half, size_t begin, size_t end, DType dtype);

  int rank_ = 0;
  int world_size_ = 1;
  std::string name_;
  size_t half_bytes_ = 0;
  size_t mapped_bytes_ = 0;
  char* base_ = nullptr;
  Header* header_ = nullptr;
  uint32_t local_sense_ = 0;
  uint64_t sequence_ = 0;
  std::chrono::microseconds idle_sleep_{0};
  bool broken_ = false;
};

}  // namespace pagoda
