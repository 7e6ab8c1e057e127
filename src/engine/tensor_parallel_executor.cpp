#include "engine/tensor_parallel_executor.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <optional>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "engine/serialization.h"
#include "util/error.h"

namespace pagoda {
namespace {

// Whether rank 0's link to the next stage queues its sends; every rank's links are made alike.
bool links_queue(const ParallelGroups& groups) {
  return groups.to_next != nullptr && groups.to_next->queued();
}

}  // namespace

TensorParallelExecutor::TensorParallelExecutor(std::unique_ptr<InProcessExecutor> local,
                                               const ParallelGroups& groups)
    : local_(std::move(local)), groups_(groups) {
  if (groups.pipeline_size == 1) {
    channels_.emplace_back(*groups.world);
  } else {
    if (groups.stage_tensor) channels_.emplace_back(*groups.stage_tensor);
    if (!groups.to_next || !groups.logits)
      fail("pipeline parallel: rank 0 has no link to the next stage or from the last");
    channels_.emplace_back(*groups.to_next);
  }
}

TensorParallelExecutor::~TensorParallelExecutor() {
  if (failed_) return;
  try {
    send(RankCommand::kShutdown);
  } catch (const std::exception& e) {
    spdlog::warn("tensor parallel: could not tell the follower ranks to stop: {}", e.what());
  }
}

void TensorParallelExecutor::send(RankCommand command, std::span<const uint8_t> payload) {
  try {
    for (RankChannel& channel : channels_) channel.send(command, payload);
  } catch (...) {
    failed_ = true;
    throw;
  }
}

int TensorParallelExecutor::max_concurrent_batches() const {
  return groups_.pipeline_size > 1 && links_queue(groups_) ? groups_.pipeline_size : 1;
}

double TensorParallelExecutor::initialize_kv_cache(int32_t num_blocks) {
  uint8_t payload[sizeof(int32_t)];
  std::memcpy(payload, &num_blocks, sizeof(num_blocks));
  send(RankCommand::kInitializeKvCache, payload);
  return local_->initialize_kv_cache(num_blocks);
}

ModelRunnerOutput TensorParallelExecutor::execute_model(const SchedulerOutput& out) {
  start_batch(out);
  return finish_oldest_batch(out);
}

void TensorParallelExecutor::start_batch(const SchedulerOutput& out) {
  if (failed_) fail("parallel: the ranks' group failed earlier");
  if (num_in_flight_ >= max_concurrent_batches())
    fail("parallel: {} batches in flight already", num_in_flight_);
  const CommunicationStats before = groups_.stats();
  send(RankCommand::kExecuteModel, encode(out));
  try {
    // Up to this stage's last layer; a later stage's ranks go on with it while this returns.
    local_->begin_step(out);
  } catch (...) {
    failed_ = true;
    throw;
  }
  ++num_in_flight_;
  stats_.max_batches_in_flight = std::max(stats_.max_batches_in_flight, num_in_flight_);
  count(out, before, /*started=*/true);
}

ModelRunnerOutput TensorParallelExecutor::finish_oldest_batch(const SchedulerOutput& out) {
  if (failed_) fail("parallel: the ranks' group failed earlier");
  if (num_in_flight_ == 0) fail("parallel: no batch in flight");
  const CommunicationStats before = groups_.stats();
  ModelRunnerOutput result;
  try {
    if (groups_.pipeline_size > 1) {
      const std::span<float> logits = local_->oldest_step_logits();
      if (!logits.empty()) groups_.logits->receive(logits.data(), logits.size_bytes());
    }
    result = local_->finish_step(out);
  } catch (...) {
    failed_ = true;
    throw;
  }
  --num_in_flight_;
  if (!out.requests.empty()) {
    for (RankChannel& channel : channels_) {
      try {
        channel.send_sampled_tokens(result.sampled_token_ids);
      } catch (...) {
        failed_ = true;
        throw;
      }
    }
  }
  count(out, before, /*started=*/false);
  return result;
}

void TensorParallelExecutor::count(const SchedulerOutput& out, const CommunicationStats& before,
                                   bool started) {
  const CommunicationStats step = groups_.stats() - before;
  int64_t num_tokens = 0;
  bool decode = !out.requests.empty();
  for (const ScheduledRequest& r : out.requests) {
    num_tokens += r.num_new_tokens;
    decode = decode && r.num_new_tokens == 1;
  }
  CommunicationStats& into = decode ? stats_.decode : stats_.other;
  into.num_calls += step.num_calls;
  into.bytes += step.bytes;
  into.seconds += step.seconds;
  if (!started) return;  // the batch was counted once, when it started
  if (decode) {
    ++stats_.num_decode_steps;
  } else {
    ++stats_.num_other_steps;
    stats_.num_other_tokens += num_tokens;
  }
}

std::string TensorParallelExecutor::stats_summary() const {
  const TensorParallelStats& s = stats_;
  const int ranks = groups_.world->world_size();
  std::string text =
      groups_.pipeline_size == 1
          ? fmt::format("tensor parallel ({} ranks) communication:", ranks)
          : fmt::format("pipeline parallel ({} stages x {} tensor-parallel ranks) communication:",
                        groups_.pipeline_size, groups_.tensor_size);
  if (s.num_decode_steps > 0) {
    const auto n = static_cast<double>(s.num_decode_steps);
    text +=
        fmt::format(" decode {} steps, {:.1f} collectives, {:.1f} KiB and {:.3f} ms per step;",
                    s.num_decode_steps, static_cast<double>(s.decode.num_calls) / n,
                    static_cast<double>(s.decode.bytes) / n / 1024.0, s.decode.seconds / n * 1e3);
  }
  if (s.num_other_tokens > 0) {
    const auto n = static_cast<double>(s.num_other_tokens);
    text += fmt::format(" prefill/mixed {} steps of {} tokens, {:.2f} KiB and {:.3f} ms per token;",
                        s.num_other_steps, s.num_other_tokens,
                        static_cast<double>(s.other.bytes) / n / 1024.0, s.other.seconds / n * 1e3);
  }
  if (s.num_decode_steps == 0 && s.num_other_tokens == 0) text += " no steps;";
  if (groups_.pipeline_size > 1) {
    text += fmt::format(" at most {} of {} batches in flight;", s.max_batches_in_flight,
                        max_concurrent_batches());
  }
  text.pop_back();
  return text;
}

void run_tensor_parallel_follower(InProcessExecutor& local, const ParallelGroups& groups) {
  // Where this rank hears rank 0: the world's broadcast (one stage), its stage's tensor group
  // (the first stage), or the link from the previous stage; and where it passes commands on.
  std::optional<RankChannel> source, onward;
  if (groups.pipeline_size == 1) {
    source.emplace(*groups.world);
  } else if (groups.stage() == 0) {
    source.emplace(*groups.stage_tensor);
  } else {
    source.emplace(*groups.from_previous);
  }
  if (groups.to_next) onward.emplace(*groups.to_next);

  std::vector<uint8_t> payload;
  // The requests of each batch run here whose sampled ids have not come yet, oldest first.
  std::deque<std::vector<ScheduledRequest>> awaiting_ids;
  std::vector<int32_t> ids;
  for (;;) {
    const RankCommand command = source->receive(payload);
    if (onward) onward->send(command, payload);
    switch (command) {
      case RankCommand::kInitializeKvCache: {
        int32_t num_blocks = 0;
        if (payload.size() != sizeof(num_blocks))
          fail("parallel: a KV cache command of {} bytes", payload.size());
        std::memcpy(&num_blocks, payload.data(), sizeof(num_blocks));
        local.initialize_kv_cache(num_blocks);
        break;
      }
      case RankCommand::kExecuteModel: {
        SchedulerOutput out = decode_scheduler_output(payload);
        local.execute_model(out);
        if (!out.requests.empty()) awaiting_ids.push_back(std::move(out.requests));
        break;
      }
      case RankCommand::kSampledTokens: {
        if (awaiting_ids.empty()) fail("parallel: sampled ids for no batch");
        const std::vector<ScheduledRequest>& requests = awaiting_ids.front();
        if (payload.size() != requests.size() * sizeof(int32_t))
          fail("parallel: {} bytes of sampled ids for a batch of {} requests", payload.size(),
               requests.size());
        ids.resize(requests.size());
        if (!ids.empty()) std::memcpy(ids.data(), payload.data(), payload.size());
        local.accept_sampled_tokens(requests, ids);
        awaiting_ids.pop_front();
        break;
      }
      case RankCommand::kShutdown:
        if (onward) groups.to_next->flush();
        return;
    }
  }
}

}  // namespace pagoda
