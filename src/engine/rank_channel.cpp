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

void RankChannel::send_bytes(const void* data, size_t bytes) {
  if (link_ != nullptr) {
    link_->send(data, bytes);
  } else {
    // broadcast writes into its buffer on the receiving ranks only; rank 0's bytes stay as given.
    communicator_->broadcast(const_cast<void*>(data), bytes, 0);
  }
}

void RankChannel::receive_bytes(void* data, size_t bytes) {
  if (link_ != nullptr) {
    link_->receive(data, bytes);
  } else {
    communicator_->broadcast(data, bytes, 0);
  }
}

void RankChannel::send(RankCommand command, std::span<const uint8_t> payload) {
  Header header{static_cast<uint32_t>(command), 0, payload.size()};
  send_bytes(&header, sizeof(header));
  if (!payload.empty()) send_bytes(payload.data(), payload.size());
}

void RankChannel::send_sampled_tokens(std::span<const int32_t> sampled_token_ids) {
  send(RankCommand::kSampledTokens, {reinterpret_cast<const uint8_t*>(sampled_token_ids.data()),
                                     sampled_token_ids.size() * sizeof(int32_t)});
}

RankCommand RankChannel::receive(std::vector<uint8_t>& payload) {
  Header header;
  receive_bytes(&header, sizeof(header));
  if (header.command < 1 || header.command > 4)
    fail("parallel: rank 0 sent an unknown command {}", header.command);
  payload.resize(header.payload_bytes);
  if (!payload.empty()) receive_bytes(payload.data(), payload.size());
  return static_cast<RankCommand>(header.command);
}

}  // namespace pagoda
