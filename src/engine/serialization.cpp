#include "engine/serialization.h"

#include <type_traits>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace pagoda {

using nlohmann::json;

// nlohmann's ADL hooks: one to_json/from_json pair per struct, fields by name.
void to_json(json& j, const StructuredOutputsParams& p) {
  const auto optional = [](const auto& value) { return value ? json(*value) : json(nullptr); };
  j = json{{"json", optional(p.json)},     {"regex", optional(p.regex)},
           {"choice", optional(p.choice)}, {"grammar", optional(p.grammar)},
           {"json_object", p.json_object}, {"any_whitespace", p.any_whitespace}};
}

void from_json(const json& j, StructuredOutputsParams& p) {
  const auto optional = [&j](const char* key, auto& value) {
    using T = typename std::remove_reference_t<decltype(value)>::value_type;
    value = j.at(key).is_null() ? std::nullopt : std::optional<T>(j.at(key).get<T>());
  };
  optional("json", p.json);
  optional("regex", p.regex);
  optional("choice", p.choice);
  optional("grammar", p.grammar);
  j.at("json_object").get_to(p.json_object);
  j.at("any_whitespace").get_to(p.any_whitespace);
}

void to_json(json& j, const SamplingParams& p) {
  j = json{
      {"n", p.n},
      {"temperature", p.temperature},
      {"top_p", p.top_p},
      {"top_k", p.top_k},
      {"min_p", p.min_p},
      {"presence_penalty", p.presence_penalty},
      {"frequency_penalty", p.frequency_penalty},
      {"repetition_penalty", p.repetition_penalty},
      {"seed", p.seed ? json(*p.seed) : json(nullptr)},
      {"stop", p.stop},
      {"stop_token_ids", p.stop_token_ids},
      {"ignore_eos", p.ignore_eos},
      {"max_tokens", p.max_tokens},
      {"min_tokens", p.min_tokens},
      {"logprobs", p.logprobs ? json(*p.logprobs) : json(nullptr)},
      {"prompt_logprobs", p.prompt_logprobs ? json(*p.prompt_logprobs) : json(nullptr)},
      {"logit_bias", p.logit_bias},
      {"allowed_token_ids", p.allowed_token_ids ? json(*p.allowed_token_ids) : json(nullptr)},
      {"bad_words", p.bad_words},
      {"bad_words_token_ids", p.bad_words_token_ids},
      {"skip_special_tokens", p.skip_special_tokens},
      {"include_stop_str_in_output", p.include_stop_str_in_output},
      {"output_kind", static_cast<int>(p.output_kind)},
      {"structured_outputs", p.structured_outputs ? json(*p.structured_outputs) : json(nullptr)}};
}

void from_json(const json& j, SamplingParams& p) {
  j.at("n").get_to(p.n);
  j.at("temperature").get_to(p.temperature);
  j.at("top_p").get_to(p.top_p);
  j.at("top_k").get_to(p.top_k);
  j.at("min_p").get_to(p.min_p);
  j.at("presence_penalty").get_to(p.presence_penalty);
  j.at("frequency_penalty").get_to(p.frequency_penalty);
  j.at("repetition_penalty").get_to(p.repetition_penalty);
  p.seed =
      j.at("seed").is_null() ? std::nullopt : std::optional<uint64_t>(j.at("seed").get<uint64_t>());
  j.at("stop").get_to(p.stop);
  j.at("stop_token_ids").get_to(p.stop_token_ids);
  j.at("ignore_eos").get_to(p.ignore_eos);
  j.at("max_tokens").get_to(p.max_tokens);
  j.at("min_tokens").get_to(p.min_tokens);
  p.logprobs =
      j.at("logprobs").is_null() ? std::nullopt : std::optional<int>(j.at("logprobs").get<int>());
  p.prompt_logprobs = j.at("prompt_logprobs").is_null()
                          ? std::nullopt
                          : std::optional<int>(j.at("prompt_logprobs").get<int>());
  j.at("logit_bias").get_to(p.logit_bias);
  p.allowed_token_ids = j.at("allowed_token_ids").is_null()
                            ? std::nullopt
                            : std::optional<std::vector<int32_t>>(
                                  j.at("allowed_token_ids").get<std::vector<int32_t>>());
  j.at("bad_words").get_to(p.bad_words);
  j.at("bad_words_token_ids").get_to(p.bad_words_token_ids);
  j.at("skip_special_tokens").get_to(p.skip_special_tokens);
  j.at("include_stop_str_in_output").get_to(p.include_stop_str_in_output);
  const int kind = j.at("output_kind").get<int>();
  if (kind < 0 || kind > static_cast<int>(RequestOutputKind::kFinalOnly)) {
    fail("output_kind {} is not a RequestOutputKind", kind);
  }
  p.output_kind = static_cast<RequestOutputKind>(kind);
  p.structured_outputs = j.at("structured_outputs").is_null()
                             ? std::nullopt
                             : std::optional<StructuredOutputsParams>(
                                   j.at("structured_outputs").get<StructuredOutputsParams>());
}

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(NewRequestData, request_id, prompt_token_ids, sampling_params,
                                   eos_token_ids, sampling_seed, block_ids, num_computed_tokens,
                                   reasoning_end_token_ids)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(CachedRequestData, request_id, resumed_from_preemption,
                                   new_block_ids, num_computed_tokens)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(ScheduledRequest, request_id, start_position, num_new_tokens,
                                   num_prompt_tokens, sample, all_logits, draft_token_ids)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(BlockCopy, src_block_id, dst_block_id)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(SchedulerOutput, new_requests, cached_requests, requests,
                                   total_num_scheduled_tokens, block_copies, preempted_request_ids,
                                   finished_request_ids)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(LogprobEntry, token_id, logprob, rank)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(PositionLogprobs, chosen, top)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(PromptLogprobsChunk, first_position, positions)

namespace {

// std::optional<T> as T or null.
template <typename T>
json optionals_to_json(const std::vector<std::optional<T>>& values) {
  json out = json::array();
  for (const std::optional<T>& v : values) out.push_back(v ? json(*v) : json(nullptr));
  return out;
}

template <typename T>
std::vector<std::optional<T>> optionals_from_json(const json& j) {
  std::vector<std::optional<T>> out;
  for (const json& v : j) out.push_back(v.is_null() ? std::nullopt : std::optional<T>(v.get<T>()));
  return out;
}

template <typename T, typename Read>
T decode_with(std::span<const uint8_t> bytes, const char* what, Read read) {
  try {
    return read(json::from_msgpack(bytes.begin(), bytes.end()));
  } catch (const json::exception& e) {
    fail("cannot decode a {} from {} bytes: {}", what, bytes.size(), e.what());
  }
}

}  // namespace

std::vector<uint8_t> encode(const SchedulerOutput& output) {
  return json::to_msgpack(json(output));
}

SchedulerOutput decode_scheduler_output(std::span<const uint8_t> bytes) {
  return decode_with<SchedulerOutput>(bytes, "SchedulerOutput",
                                      [](const json& j) { return j.get<SchedulerOutput>(); });
}

std::vector<uint8_t> encode(const ModelRunnerOutput& output) {
  const json j{{"sampled_token_ids", output.sampled_token_ids},
               {"logprobs", optionals_to_json(output.logprobs)},
               {"prompt_logprobs", optionals_to_json(output.prompt_logprobs)},
               {"num_accepted_draft_tokens", output.num_accepted_draft_tokens},
               {"draft_logprobs", output.draft_logprobs},
               {"draft_token_ids", output.draft_token_ids},
               {"num_moe_layers", output.num_moe_layers},
               {"num_routed_experts", output.num_routed_experts}};
  return json::to_msgpack(j);
}

ModelRunnerOutput decode_model_runner_output(std::span<const uint8_t> bytes) {
  return decode_with<ModelRunnerOutput>(bytes, "ModelRunnerOutput", [](const json& j) {
    ModelRunnerOutput out;
    j.at("sampled_token_ids").get_to(out.sampled_token_ids);
    out.logprobs = optionals_from_json<PositionLogprobs>(j.at("logprobs"));
    out.prompt_logprobs = optionals_from_json<PromptLogprobsChunk>(j.at("prompt_logprobs"));
    j.at("num_accepted_draft_tokens").get_to(out.num_accepted_draft_tokens);
    j.at("draft_logprobs").get_to(out.draft_logprobs);
    j.at("draft_token_ids").get_to(out.draft_token_ids);
    j.at("num_moe_layers").get_to(out.num_moe_layers);
    j.at("num_routed_experts").get_to(out.num_routed_experts);
    return out;
  });
}

}  // namespace pagoda
