// A stand-in for the model runner in scheduler tests: a paged "KV cache" that stores, per slot,
// the token and position written there, and a next-token function that reads the whole sequence
// back through the block table (as paged attention would). Any wrong block table, prefix hit or
// block copy changes what is read back, which changes the outputs and is counted as an error.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/block_pool.h"
#include "engine/request.h"
#include "engine/scheduler_output.h"

namespace pagoda::testing {

class FakeModel {
 public:
  // (request, sequence read back from the cache) -> next token.
  using NextToken = std::function<int32_t(const Request&, std::span<const int32_t>)>;

  FakeModel(int32_t num_blocks, int32_t block_size, int32_t vocab_size = 1000)
      : block_size_(block_size),
        vocab_size_(vocab_size),
        slots_(static_cast<size_t>(num_blocks) * static_cast<size_t>(block_size)) {}

  void set_next_token(NextToken fn) { next_token_ = std::move(fn); }
  // When set, every written block must be held by exactly one request (no write into a block
  // shared through the prefix cache or a fork).
  void check_exclusive_writes(const BlockPool* pool) { pool_ = pool; }

  int64_t num_integrity_errors() const { return num_integrity_errors_; }
  int64_t num_shared_writes() const { return num_shared_writes_; }
  int64_t num_tokens_computed() const { return num_tokens_computed_; }

  // A deterministic "model": a function of the whole sequence (and the request's seed, so n > 1
  // samples diverge), spread over the vocabulary.
  static int32_t default_next_token(const Request& request, std::span<const int32_t> sequence,
                                    int32_t vocab_size) {
    uint64_t h = 1469598103934665603ull ^ request.sampling_params.seed.value_or(0);
    for (int32_t t : sequence) {
      h ^= static_cast<uint32_t>(t);
      h *= 1099511628211ull;
      h ^= h >> 29;
    }
    return static_cast<int32_t>(h % static_cast<uint64_t>(vocab_size));
  }

  ModelRunnerOutput execute(const SchedulerOutput& out) {
    for (const BlockCopy& copy : out.block_copies) {
      for (int32_t i = 0; i < block_size_; ++i) {
        slots_[slot_index(copy.dst_block_id, i)] = slots_[slot_index(copy.src_block_id, i)];
      }
    }
    // Write every request's new tokens first, then read: like a layer that stores this step's
    // K/V before attention runs.
    for (const ScheduledRequest& s : out.requests) {
      for (size_t j = 0; j < s.token_ids.size(); ++j) {
        const int32_t position = s.start_position + static_cast<int32_t>(j);
        const int32_t block = s.block_ids.at(static_cast<size_t>(position / block_size_));
        if (pool_ != nullptr && pool_->ref_count(block) != 1) ++num_shared_writes_;
        slots_[slot_index(block, position % block_size_)] = Slot{s.token_ids[j], position};
      }
      num_tokens_computed_ += static_cast<int64_t>(s.token_ids.size());
    }
    ModelRunnerOutput result;
    result.sampled_tokens.resize(out.requests.size());
    for (size_t i = 0; i < out.requests.size(); ++i) {
      const ScheduledRequest& s = out.requests[i];
      if (!s.sample) continue;
      const int32_t length = s.start_position + s.num_new_tokens();
      sequence_.clear();
      const auto& truth = s.request->all_token_ids();
      for (int32_t p = 0; p < length; ++p) {
        const int32_t block = s.block_ids.at(static_cast<size_t>(p / block_size_));
        const Slot& slot = slots_[slot_index(block, p % block_size_)];
        if (slot.position != p || slot.token_id != truth[static_cast<size_t>(p)]) {
          ++num_integrity_errors_;
        }
        sequence_.push_back(slot.token_id);
      }
      result.sampled_tokens[i].token_id =
          next_token_ ? next_token_(*s.request, sequence_)
                      : default_next_token(*s.request, sequence_, vocab_size_);
    }
    return result;
  }

 private:
  struct Slot {
    int32_t token_id = -1;
    int32_t position = -1;
  };

  size_t slot_index(int32_t block, int32_t offset) const {
    return static_cast<size_t>(block) * static_cast<size_t>(block_size_) +
           static_cast<size_t>(offset);
  }

  int32_t block_size_;
  int32_t vocab_size_;
  std::vector<Slot> slots_;
  std::vector<int32_t> sequence_;
  NextToken next_token_;
  const BlockPool* pool_ = nullptr;
  int64_t num_integrity_errors_ = 0;
  int64_t num_shared_writes_ = 0;
  int64_t num_tokens_computed_ = 0;
};

}  // namespace pagoda::testing
