#include "engine/rank_channel.h"

#include <cstring>

#include "util/error.h"

namespace pagoda {
namespace {

struct Header {
  uint32_t command = 0;
  uint32_t reserved = 0;
  uint64_t payload_bytes = 0;
};
static_assert(sizeof(Header) == 16);

}  // namespace

void RankChannel::send(RankCommand command, std::span<const uint8_t> payload) {
  Header header{static_cast<uint32_t>(command), 0, payload.size()};
  communicator_.broadcast(&header, sizeof(header), 0);
  // broadcast writes into its buffer on the receiving ranks only; rank 0's bytes stay as given.
  if (!payload.empty())
    communicator_.broadcast(const_cast<uint8_t*>(payload.data()), payload.size(), 0);
}

RankCommand RankChannel::receive(std::vector<uint8_t>& payload) {
  Header header;
  communicator_.broadcast(&header, sizeof(header), 0);
  if (header.command < 1 || header.command > 3)
    fail("tensor parallel: rank 0 sent an unknown command {}", header.command);
  payload.resize(header.payload_bytes);
  if (!payload.empty()) communicator_.broadcast(payload.data(), payload.size(), 0);
  return static_cast<RankCommand>(header.command);
}

void RankChannel::share_sampled_tokens(std::vector<int32_t>& sampled_token_ids) {
  if (sampled_token_ids.empty()) return;
  communicator_.broadcast(sampled_token_ids.data(), sampled_token_ids.size() * sizeof(int32_t), 0);
}

}  // namespace pagoda
