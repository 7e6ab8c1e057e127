// SchedulerOutput and ModelRunnerOutput as bytes, for an executor whose workers live in other
// processes or on other machines (tensor and pipeline parallel ranks): MessagePack through
// nlohmann::json, field names kept so a reader can tell versions apart. decode_* throws
// pagoda::Error on bytes that are not such a message.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/scheduler_output.h"

namespace pagoda {

std::vector<uint8_t> encode(const SchedulerOutput& output);
SchedulerOutput decode_scheduler_output(std::span<const uint8_t> bytes);

std::vector<uint8_t> encode(const ModelRunnerOutput& output);
ModelRunnerOutput decode_model_runner_output(std::span<const uint8_t> bytes);

}  // namespace pagoda
