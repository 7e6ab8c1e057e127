// The commands rank 0 sends its followers: a fixed 16-byte header (command, payload size) and
// then the payload. Only deltas travel, as in vLLM v1: each step's plain-data SchedulerOutput
// (engine/serialization.h), and the token ids sampled in it once rank 0 has them.
// A channel is either a group's broadcast rooted at rank 0 (tensor parallelism: every rank
// hears rank 0 at once), or one pipeline link (a stage passes each command on to the next
// stage, ahead of that batch's hidden states).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/pair_link.h"

namespace pagoda {

enum class RankCommand : uint32_t {
  kInitializeKvCache = 1,  // payload: int32 number of blocks
  kExecuteModel = 2,       // payload: the encoded SchedulerOutput
  kShutdown = 3,           // no payload: rank 0 is done, the followers return
  // payload: int32 ids sampled in the oldest batch whose ids have not come yet, one per request
  // of that batch (-1: none)
  kSampledTokens = 4,
};

class RankChannel {
 public:
  // A broadcast from rank 0 of `communicator`, which must outlive the channel.
  explicit RankChannel(Communicator& communicator) : communicator_(&communicator) {}
  // One way over `link`, which must outlive the channel.
  explicit RankChannel(PairLink& link) : link_(&link) {}

  // The sending end (rank 0 of the group, or the link's sender).
  void send(RankCommand command, std::span<const uint8_t> payload = {});
  void send_sampled_tokens(std::span<const int32_t> sampled_token_ids);
  // The receiving end: blocks until the next command comes; payload is replaced.
  RankCommand receive(std::vector<uint8_t>& payload);

 private:
  void send_bytes(const void* data, size_t bytes);
  void receive_bytes(void* data, size_t bytes);

  Communicator* communicator_ = nullptr;
  PairLink* link_ = nullptr;
};

}  // namespace pagoda
