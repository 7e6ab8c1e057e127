#include "parallel/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <thread>

#include "util/error.h"
#include "util/half.h"

namespace pagoda {
namespace {

// MPI counts are ints: larger buffers go through in pieces of this many elements.
constexpr size_t kMaxCount = size_t{1} << 30;

void check(int result, const char* call) {
  if (result == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(result, text, &length);
  fail("{}: {}", call, std::string(text, static_cast<size_t>(length)));
}

// How long a polled wait looks without sleeping: a message already on its way arrives in
// microseconds, and a sleep costs at least ~50 us of timer slack.
constexpr std::chrono::microseconds kBusyPoll{20};

// Completes a non-blocking call by polling it (MpiCommunicator::set_idle_sleep).
void wait_polling(MPI_Request& request, std::chrono::microseconds idle_sleep, const char* call) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point busy_until = Clock::now() + kBusyPoll;
  for (;;) {
    int done = 0;
    check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), call);
    if (done != 0) return;
    if (Clock::now() >= busy_until) std::this_thread::sleep_for(idle_sleep);
  }
}

bool mpi_thread_multiple() {
  int level = MPI_THREAD_SINGLE;
  check(MPI_Query_thread(&level), "MPI_Query_thread");
  return level == MPI_THREAD_MULTIPLE;
}

}  // namespace

struct MpiCommunicator::Handle {
  MPI_Comm comm = MPI_COMM_WORLD;
  bool owned = false;  // made by split: freed with the communicator
};

MpiCommunicator::MpiCommunicator(Threads threads) : comm_(std::make_unique<Handle>()) {
  int initialized = 0;
  check(MPI_Initialized(&initialized), "MPI_Initialized");
  if (!initialized) {
    const int wanted = threads == Threads::kMultiple ? MPI_THREAD_MULTIPLE : MPI_THREAD_SERIALIZED;
    int provided = 0;
    check(MPI_Init_thread(nullptr, nullptr, wanted, &provided), "MPI_Init_thread");
    if (provided < MPI_THREAD_SERIALIZED)
      fail("MPI_Init_thread: this MPI cannot be called from more than one thread");
    finalize_ = true;
  }
  thread_multiple_ = mpi_thread_multiple();
  // Errors come back as codes (turned into Error), not as an abort of the whole job.
  check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(MPI_COMM_WORLD, &world_size_), "MPI_Comm_size");
}

MpiCommunicator::MpiCommunicator(std::unique_ptr<Handle> handle)
    : comm_(std::move(handle)), thread_multiple_(mpi_thread_multiple()) {
  check(MPI_Comm_set_errhandler(comm_->comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check(MPI_Comm_rank(comm_->comm, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(comm_->comm, &world_size_), "MPI_Comm_size");
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (comm_->owned) MPI_Comm_free(&comm_->comm);
  if (finalize_) MPI_Finalize();
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::split(int color, int key) {
  auto handle = std::make_unique<Handle>();
  check(MPI_Comm_split(comm_->comm, color >= 0 ? color : MPI_UNDEFINED, key, &handle->comm),
        "MPI_Comm_split");
  if (handle->comm == MPI_COMM_NULL) return nullptr;
  handle->owned = true;
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(std::move(handle)));
}

void MpiCommunicator::all_reduce_sum(void* data, size_t count, DType dtype) {
  check_reduce_dtype(dtype);
  if (world_size_ == 1 || count == 0) return;
  if (dtype == DType::kF32) {
    float* values = static_cast<float*>(data);
    for (size_t offset = 0; offset < count; offset += kMaxCount) {
      const int n = static_cast<int>(std::min(kMaxCount, count - offset));
      if (idle_sleep_.count() == 0) {
        check(MPI_Allreduce(MPI_IN_PLACE, values + offset, n, MPI_FLOAT, MPI_SUM, comm_->comm),
              "MPI_Allreduce");
      } else {
        MPI_Request request = MPI_REQUEST_NULL;
        check(MPI_Iallreduce(MPI_IN_PLACE, values + offset, n, MPI_FLOAT, MPI_SUM, comm_->comm,
                             &request),
              "MPI_Iallreduce");
        wait_polling(request, idle_sleep_, "MPI_Iallreduce");
      }
    }
    return;
  }
  uint16_t* halves = static_cast<uint16_t*>(data);
  const bool bf16 = dtype == DType::kBF16;
  if (widened_.size() < count) widened_.resize(count);
  for (size_t i = 0; i < count; ++i) {
    widened_[i] = bf16 ? bf16_to_f32(halves[i]) : f16_to_f32(halves[i]);
  }
  all_reduce_sum(widened_.data(), count, DType::kF32);
  for (size_t i = 0; i < count; ++i) {
    halves[i] = bf16 ? f32_to_bf16(widened_[i]) : f32_to_f16(widened_[i]);
  }
}

void MpiCommunicator::all_gather(const void* send, void* recv, size_t bytes_per_rank) {
  if (bytes_per_rank == 0) return;
  if (bytes_per_rank > static_cast<size_t>(INT_MAX)) {
    fail("all_gather: {} bytes per rank is over MPI's int count", bytes_per_rank);
  }
  const int n = static_cast<int>(bytes_per_rank);
  if (idle_sleep_.count() == 0) {
    check(MPI_Allgather(send, n, MPI_BYTE, recv, n, MPI_BYTE, comm_->comm), "MPI_Allgather");
    return;
  }
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Iallgather(send, n, MPI_BYTE, recv, n, MPI_BYTE, comm_->comm, &request),
        "MPI_Iallgather");
  wait_polling(request, idle_sleep_, "MPI_Iallgather");
}

void MpiCommunicator::broadcast(void* data, size_t bytes, int root) {
  check_root(root, world_size_);
  char* buffer = static_cast<char*>(data);
  for (size_t offset = 0; offset < bytes; offset += kMaxCount) {
    const int n = static_cast<int>(std::min(kMaxCount, bytes - offset));
    if (idle_sleep_.count() == 0) {
      check(MPI_Bcast(buffer + offset, n, MPI_BYTE, root, comm_->comm), "MPI_Bcast");
    } else {
      MPI_Request request = MPI_REQUEST_NULL;
      check(MPI_Ibcast(buffer + offset, n, MPI_BYTE, root, comm_->comm, &request), "MPI_Ibcast");
      wait_polling(request, idle_sleep_, "MPI_Ibcast");
    }
  }
}

void MpiCommunicator::barrier() {
  if (idle_sleep_.count() == 0) {
    check(MPI_Barrier(comm_->comm), "MPI_Barrier");
    return;
  }
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Ibarrier(comm_->comm, &request), "MPI_Ibarrier");
  wait_polling(request, idle_sleep_, "MPI_Ibarrier");
}

}  // namespace pagoda
