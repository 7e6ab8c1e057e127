// A stand-in for the model runner in scheduler tests: a paged "KV cache" that stores, per slot,
// the token and position written there, and a next-token function that reads the whole sequence
// back through the block table (as paged attention would). Any wrong block table, prefix hit or
// block copy changes what is read back, which changes the outputs and is counted as an error.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/block_pool.h"
#include "engine/request.h"
#include "engine/scheduler_output.h"
#include "pagoda/sampling_params.h"

namespace pagoda::testing {

class FakeModel {
 public:
  // The fake runner's copy of one request, kept up to date from the SchedulerOutput's
  // new-request data and diffs, as the real runner keeps its own.
  struct State {
    std::vector<int32_t> tokens;  // prompt, then what this model sampled
    int32_t num_prompt_tokens = 0;
    std::vector<int32_t> block_ids;
    int32_t num_computed_tokens = 0;
    SamplingParams params;
    int32_t num_output_tokens() const {
      return static_cast<int32_t>(tokens.size()) - num_prompt_tokens;
    }
  };
  // (request, sequence read back from the cache) -> next token.
  using NextToken = std::function<int32_t(const State&, std::span<const int32_t>)>;

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
  // The fake runner's view of a request (nullptr once finished and dropped).
  const State* state(const std::string& request_id) const {
    auto it = states_.find(request_id);
    return it == states_.end() ? nullptr : &it->second;
  }

  // A deterministic "model": a function of the whole sequence (and the request's seed, so n > 1
  // samples diverge), spread over the vocabulary.
  static int32_t default_next_token(const State& request, std::span<const int32_t> sequence,
                                    int32_t vocab_size) {
    uint64_t h = 1469598103934665603ull ^ request.params.seed.value_or(0);
    for (int32_t t : sequence) {
      h ^= static_cast<uint32_t>(t);
      h *= 1099511628211ull;
      h ^= h >> 29;
    }
    return static_cast<int32_t>(h % static_cast<uint64_t>(vocab_size));
  }

  ModelRunnerOutput execute(const SchedulerOutput& out) {
    for (const std::string& id : out.finished_request_ids) states_.erase(id);
    for (const NewRequestData& data : out.new_requests) {
      State& st = states_[data.request_id];
      st = State{};
      st.tokens = data.prompt_token_ids;
      st.num_prompt_tokens = static_cast<int32_t>(data.prompt_token_ids.size());
      st.block_ids = data.block_ids;
      st.num_computed_tokens = data.num_computed_tokens;
      st.params = data.sampling_params;
    }
    for (const CachedRequestData& data : out.cached_requests) {
      State& st = states_.at(data.request_id);
      if (data.resumed_from_preemption) st.block_ids.clear();
      st.block_ids.insert(st.block_ids.end(), data.new_block_ids.begin(), data.new_block_ids.end());
      st.num_computed_tokens = data.num_computed_tokens;
    }
    for (const BlockCopy& copy : out.block_copies) {
      for (int32_t i = 0; i < block_size_; ++i) {
        slots_[slot_index(copy.dst_block_id, i)] = slots_[slot_index(copy.src_block_id, i)];
      }
    }
    // Write every request's new tokens first, then read: like a layer that stores this step's
    // K/V before attention runs.
    for (const ScheduledRequest& s : out.requests) {
      State& st = states_.at(s.request_id);
      if (st.num_computed_tokens != s.start_position) ++num_integrity_errors_;
      for (int32_t j = 0; j < s.num_new_tokens; ++j) {
        const int32_t position = s.start_position + j;
        const int32_t block = st.block_ids.at(static_cast<size_t>(position / block_size_));
        if (pool_ != nullptr && pool_->ref_count(block) != 1) ++num_shared_writes_;
        slots_[slot_index(block, position % block_size_)] =
            Slot{st.tokens.at(static_cast<size_t>(position)), position};
      }
      st.num_computed_tokens = s.start_position + s.num_new_tokens;
      num_tokens_computed_ += s.num_new_tokens;
    }
    ModelRunnerOutput result;
    result.sampled_token_ids.assign(out.requests.size(), -1);
    result.logprobs.resize(out.requests.size());
    result.prompt_logprobs.resize(out.requests.size());
    for (size_t i = 0; i < out.requests.size(); ++i) {
      const ScheduledRequest& s = out.requests[i];
      if (!s.sample) continue;
      State& st = states_.at(s.request_id);
      const int32_t length = s.start_position + s.num_new_tokens;
      sequence_.clear();
      for (int32_t p = 0; p < length; ++p) {
        const int32_t block = st.block_ids.at(static_cast<size_t>(p / block_size_));
        const Slot& slot = slots_[slot_index(block, p % block_size_)];
        if (slot.position != p || slot.token_id != st.tokens[static_cast<size_t>(p)]) {
          ++num_integrity_errors_;
        }
        sequence_.push_back(slot.token_id);
      }
      const int32_t token =
          next_token_ ? next_token_(st, sequence_) : default_next_token(st, sequence_, vocab_size_);
      st.tokens.push_back(token);
      result.sampled_token_ids[i] = token;
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
  std::unordered_map<std::string, State> states_;
  NextToken next_token_;
  const BlockPool* pool_ = nullptr;
  int64_t num_integrity_errors_ = 0;
  int64_t num_shared_writes_ = 0;
  int64_t num_tokens_computed_ = 0;
};

}  // namespace pagoda::testing
