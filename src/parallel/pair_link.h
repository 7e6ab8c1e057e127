// Point-to-point between two ranks, for pipeline parallelism: a stage sends its hidden states
// (and the commands it passes on) to the next stage, the last stage sends the logits back to
// rank 0. The link is a group of exactly two ranks of any Communicator transport (shared
// memory, MPI), and a message is a broadcast rooted at the sender: with two ranks a broadcast
// moves the bytes one way, once. The two ends must send and receive the same sizes in the same
// order.
//
// Sending does not wait for the receiver (Mode::kQueued): send copies the message into a queue
// and a sender thread of the link's own moves the queued messages across in order, so a stage
// hands its output on and starts its next micro-batch while the next stage is still busy with
// the one before (the GPipe overlap).
// The sender thread is the only user of the group at the sending end, so the transport must
// allow a second thread (Communicator::allows_concurrent_groups: MPI needs
// MPI_THREAD_MULTIPLE); Mode::kBlocking sends on the caller's thread instead, and a pipeline
// over such links keeps one batch in flight. sending_mode picks the one the transport allows.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/counting_communicator.h"

namespace pagoda {

class PairLink {
 public:
  enum class Mode { kQueued, kBlocking };

  // The sending end's mode over `group`: kQueued where its transport lets a second thread
  // send, else kBlocking.
  static Mode sending_mode(const Communicator& group);

  // `group` has world size 2; this end is its rank(). Throws Error for kQueued over a group
  // that does not allow concurrent groups.
  explicit PairLink(std::unique_ptr<Communicator> group, Mode mode = Mode::kQueued);
  // Sends what is still queued (the receiver is alive and reading, or dead and noticed: either
  // ends the wait), then stops the sender thread.
  ~PairLink();
  PairLink(const PairLink&) = delete;
  PairLink& operator=(const PairLink&) = delete;

  // Queued: returns once data[0, bytes) is copied. Throws Error when an earlier send failed
  // (the receiver died): the link is unusable from then on.
  void send(const void* data, size_t bytes);
  // Blocks until the other end's next message has arrived into data[0, bytes).
  void receive(void* data, size_t bytes);
  // Returns once every queued message has gone across; throws the sender thread's error.
  void flush();

  // Whether a send returns before the receiver took the message.
  bool queued() const { return mode_ == Mode::kQueued; }
  // Messages, bytes and the seconds this end's caller spent in send and receive (a queued send
  // costs its copy), counted on the caller's thread.
  const CommunicationStats& stats() const { return stats_; }

 private:
  void sender_loop();
  // Throws the sender thread's error, if it met one. Needs mutex_.
  void rethrow_send_error();

  std::unique_ptr<Communicator> group_;
  Mode mode_;
  CommunicationStats stats_;

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::vector<char>> queue_;   // oldest first; the front is being sent
  std::vector<std::vector<char>> spare_;  // sent buffers, reused so steps do not allocate
  bool stopping_ = false;
  std::exception_ptr send_error_;
  std::thread sender_;
};

}  // namespace pagoda
