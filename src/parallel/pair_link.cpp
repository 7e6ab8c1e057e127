#include "parallel/pair_link.h"

#include <chrono>
#include <cstring>

#include "util/error.h"

namespace pagoda {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

PairLink::Mode PairLink::sending_mode(const Communicator& group) {
  return group.allows_concurrent_groups() ? Mode::kQueued : Mode::kBlocking;
}

PairLink::PairLink(std::unique_ptr<Communicator> group, Mode mode)
    : group_(std::move(group)), mode_(mode) {
  if (group_ == nullptr || group_->world_size() != 2)
    fail("a point-to-point link needs a group of exactly 2 ranks");
  if (mode_ == Mode::kQueued && !group_->allows_concurrent_groups()) {
    fail(
        "a queued point-to-point link sends from a thread of its own, which this transport "
        "does not allow (MPI without MPI_THREAD_MULTIPLE)");
  }
  if (mode_ == Mode::kQueued) sender_ = std::thread([this] { sender_loop(); });
}

PairLink::~PairLink() {
  if (!sender_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  sender_.join();
}

void PairLink::rethrow_send_error() {
  if (send_error_) std::rethrow_exception(send_error_);
}

void PairLink::send(const void* data, size_t bytes) {
  const auto start = std::chrono::steady_clock::now();
  if (mode_ == Mode::kBlocking) {
    // broadcast takes a mutable buffer because receivers write it; the root's is only read.
    group_->broadcast(const_cast<void*>(data), bytes, group_->rank());
  } else {
    std::unique_lock lock(mutex_);
    rethrow_send_error();
    std::vector<char> buffer;
    if (!spare_.empty()) {
      buffer = std::move(spare_.back());
      spare_.pop_back();
    }
    buffer.resize(bytes);
    if (bytes > 0) std::memcpy(buffer.data(), data, bytes);
    queue_.push_back(std::move(buffer));
    lock.unlock();
    changed_.notify_all();
  }
  stats_.num_calls += 1;
  stats_.bytes += static_cast<int64_t>(bytes);
  stats_.seconds += seconds_since(start);
}

void PairLink::receive(void* data, size_t bytes) {
  const auto start = std::chrono::steady_clock::now();
  group_->broadcast(data, bytes, 1 - group_->rank());
  stats_.num_calls += 1;
  stats_.bytes += static_cast<int64_t>(bytes);
  stats_.seconds += seconds_since(start);
}

void PairLink::flush() {
  if (mode_ == Mode::kBlocking) return;
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return queue_.empty() || send_error_; });
  rethrow_send_error();
}

void PairLink::sender_loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return !queue_.empty() || stopping_; });
    if (queue_.empty()) return;  // stopping, and everything went
    std::vector<char>& message = queue_.front();
    lock.unlock();
    try {
      group_->broadcast(message.data(), message.size(), group_->rank());
    } catch (...) {
      lock.lock();
      send_error_ = std::current_exception();
      queue_.clear();
      changed_.notify_all();
      return;
    }
    lock.lock();
    spare_.push_back(std::move(queue_.front()));
    queue_.pop_front();
    changed_.notify_all();
  }
}

}  // namespace pagoda
