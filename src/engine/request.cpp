// Request helpers: status names and the n > 1 split.
#include "engine/request.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

namespace pagoda {

Request::Request(std::string id, std::vector<int32_t> prompt, SamplingParams params,
                 std::vector<int32_t> eos_ids)
    : request_id(std::move(id)),
      sampling_params(std::move(params)),
      eos_token_ids(std::move(eos_ids)),
      tokens_(std::move(prompt)) {
  num_prompt_tokens_ = static_cast<int32_t>(tokens_.size());
  // Room for the outputs up front (capped: max_tokens may be huge when the engine leaves it to
  // max_model_len), so appending rarely moves the token vector mid-generation.
  constexpr int kMaxReservedOutputs = 1 << 15;
  const int reserved = std::clamp(sampling_params.max_tokens, 0, kMaxReservedOutputs);
  tokens_.reserve(tokens_.size() + static_cast<size_t>(reserved));
}

std::string_view request_status_name(RequestStatus status) {
  switch (status) {
    case RequestStatus::kWaiting:
      return "waiting";
    case RequestStatus::kRunning:
      return "running";
    case RequestStatus::kPreempted:
      return "preempted";
    case RequestStatus::kFinishedStopped:
      return "finished_stopped";
    case RequestStatus::kFinishedLength:
      return "finished_length";
    case RequestStatus::kFinishedAborted:
      return "finished_aborted";
  }
  return "unknown";
}

bool is_finished(RequestStatus status) {
  return status == RequestStatus::kFinishedStopped || status == RequestStatus::kFinishedLength ||
         status == RequestStatus::kFinishedAborted;
}

std::string_view finish_reason_name(RequestStatus status) {
  switch (status) {
    case RequestStatus::kFinishedStopped:
      return "stop";
    case RequestStatus::kFinishedLength:
      return "length";
    case RequestStatus::kFinishedAborted:
      return "abort";
    default:
      return "";
  }
}

std::vector<Request> split_samples(Request request) {
  std::vector<Request> samples;
  const int n = request.sampling_params.n;
  if (n <= 1) {
    samples.push_back(std::move(request));
    return samples;
  }
  samples.reserve(static_cast<size_t>(n));
  const std::string leader_id = fmt::format("{}#0", request.request_id);
  for (int i = 0; i < n; ++i) {
    Request sample = request;
    sample.request_id = fmt::format("{}#{}", request.request_id, i);
    sample.sampling_params.n = 1;
    if (request.sampling_params.seed) {
      sample.sampling_params.seed = *request.sampling_params.seed + static_cast<uint64_t>(i);
    }
    if (i > 0) sample.fork_leader_id = leader_id;
    samples.push_back(std::move(sample));
  }
  return samples;
}

}  // namespace pagoda
