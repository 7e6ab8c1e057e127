#include "engine/tensor_parallel_executor.h"

#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "engine/serialization.h"
#include "util/error.h"

namespace pagoda {

TensorParallelExecutor::TensorParallelExecutor(std::unique_ptr<InProcessExecutor> local,
                                               const ParallelGroups& groups)
    : local_(std::move(local)), groups_(groups), channel_(*groups.world) {}

TensorParallelExecutor::~TensorParallelExecutor() {
  if (failed_) return;
  try {
    channel_.send(RankCommand::kShutdown);
  } catch (const std::exception& e) {
    spdlog::warn("tensor parallel: could not tell the follower ranks to stop: {}", e.what());
  }
}

double TensorParallelExecutor::initialize_kv_cache(int32_t num_blocks) {
  uint8_t payload[sizeof(int32_t)];
  std::memcpy(payload, &num_blocks, sizeof(num_blocks));
  try {
    channel_.send(RankCommand::kInitializeKvCache, payload);
  } catch (...) {
    failed_ = true;
    throw;
  }
  return local_->initialize_kv_cache(num_blocks);
}

ModelRunnerOutput TensorParallelExecutor::execute_model(const SchedulerOutput& out) {
  const CommunicationStats before = groups_.stats();
  ModelRunnerOutput result;
  try {
    channel_.send(RankCommand::kExecuteModel, encode(out));
    result = local_->execute_model(out);
    channel_.share_sampled_tokens(result.sampled_token_ids);
  } catch (...) {
    failed_ = true;
    throw;
  }
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
  if (decode) {
    ++stats_.num_decode_steps;
  } else {
    ++stats_.num_other_steps;
    stats_.num_other_tokens += num_tokens;
  }
  return result;
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
  if (s.num_decode_steps == 0 && s.num_other_tokens == 0) text += " no steps";
  text.pop_back();
  return text;
}

void run_tensor_parallel_follower(InProcessExecutor& local, Communicator& communicator) {
  RankChannel channel(communicator);
  std::vector<uint8_t> payload;
  std::vector<int32_t> sampled;
  for (;;) {
    switch (channel.receive(payload)) {
      case RankCommand::kInitializeKvCache: {
        int32_t num_blocks = 0;
        if (payload.size() != sizeof(num_blocks))
          fail("tensor parallel: a KV cache command of {} bytes", payload.size());
        std::memcpy(&num_blocks, payload.data(), sizeof(num_blocks));
        local.initialize_kv_cache(num_blocks);
        break;
      }
      case RankCommand::kExecuteModel: {
        const SchedulerOutput out = decode_scheduler_output(payload);
        local.execute_model(out);
        sampled.assign(out.requests.size(), -1);
        channel.share_sampled_tokens(sampled);
        local.accept_sampled_tokens(sampled);
        break;
      }
      case RankCommand::kShutdown:
        return;
    }
  }
}

}  // namespace pagoda
