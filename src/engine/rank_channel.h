// The commands rank 0 sends its tensor-parallel followers, over the group's broadcast: a fixed
// 16-byte header (command, payload size) and then the payload. Only deltas travel, as in vLLM
// v1: each step's plain-data SchedulerOutput (engine/serialization.h), and the sampled token
// ids after it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "parallel/communicator.h"

namespace pagoda {

enum class RankCommand : uint32_t {
  kInitializeKvCache = 1,  // payload: int32 number of blocks
  kExecuteModel = 2,       // payload: the encoded SchedulerOutput; then the sampled ids
  kShutdown = 3,           // no payload: rank 0 is done, the followers return
};

class RankChannel {
 public:
  // Rank 0 is the sender; `communicator` must outlive the channel.
  explicit RankChannel(Communicator& communicator) : communicator_(communicator) {}

  // Rank 0.
  void send(RankCommand command, std::span<const uint8_t> payload = {});
  // Ranks >= 1: blocks until rank 0 sends; payload is replaced.
  RankCommand receive(std::vector<uint8_t>& payload);
  // Every rank: rank 0's ids (one per request of the step) on every rank.
  void share_sampled_tokens(std::vector<int32_t>& sampled_token_ids);

 private:
  Communicator& communicator_;
};

}  // namespace pagoda
