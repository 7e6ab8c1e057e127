// Conversions from Python values to the engine's types, and the GIL-free stepping loops.
#include "engine_handle.h"

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <utility>

#include <pybind11/stl.h>

#include "pagoda/error.h"

namespace pagoda::python {
namespace {

template <typename T>
void set_from(T& field, const py::handle& value) {
  field = value.cast<T>();
}

// One entry per EngineArgs field the Python side may set, so that adding a field here is all
// that exposing a new engine setting takes.
using FieldSetter = std::function<void(EngineArgs&, const py::handle&)>;
const std::map<std::string, FieldSetter>& engine_arg_setters() {
  static const std::map<std::string, FieldSetter> setters = {
      {"model", [](EngineArgs& a, const py::handle& v) { set_from(a.model, v); }},
      {"tokenizer", [](EngineArgs& a, const py::handle& v) { set_from(a.tokenizer, v); }},
      {"revision", [](EngineArgs& a, const py::handle& v) { set_from(a.revision, v); }},
      {"tokenizer_revision",
       [](EngineArgs& a, const py::handle& v) { set_from(a.tokenizer_revision, v); }},
      {"download_dir", [](EngineArgs& a, const py::handle& v) { set_from(a.download_dir, v); }},
      {"gguf_file", [](EngineArgs& a, const py::handle& v) { set_from(a.gguf_file, v); }},
      {"served_model_name",
       [](EngineArgs& a, const py::handle& v) { set_from(a.served_model_name, v); }},
      {"chat_template", [](EngineArgs& a, const py::handle& v) { set_from(a.chat_template, v); }},
      {"chat_template_content_format",
       [](EngineArgs& a, const py::handle& v) { set_from(a.chat_template_content_format, v); }},
      {"generation_config",
       [](EngineArgs& a, const py::handle& v) { set_from(a.generation_config, v); }},
      {"max_logprobs", [](EngineArgs& a, const py::handle& v) { set_from(a.max_logprobs, v); }},
      {"max_model_len", [](EngineArgs& a, const py::handle& v) { set_from(a.max_model_len, v); }},
      {"max_num_seqs", [](EngineArgs& a, const py::handle& v) { set_from(a.max_num_seqs, v); }},
      {"max_num_batched_tokens",
       [](EngineArgs& a, const py::handle& v) { set_from(a.max_num_batched_tokens, v); }},
      {"block_size", [](EngineArgs& a, const py::handle& v) { set_from(a.block_size, v); }},
      {"kv_cache_space_bytes",
       [](EngineArgs& a, const py::handle& v) { set_from(a.kv_cache_space_bytes, v); }},
      {"kv_cache_by_need",
       [](EngineArgs& a, const py::handle& v) { set_from(a.kv_cache_by_need, v); }},
      {"kv_cache_dtype", [](EngineArgs& a, const py::handle& v) { set_from(a.kv_cache_dtype, v); }},
      {"enable_prefix_caching",
       [](EngineArgs& a, const py::handle& v) { set_from(a.enable_prefix_caching, v); }},
      {"enable_chunked_prefill",
       [](EngineArgs& a, const py::handle& v) { set_from(a.enable_chunked_prefill, v); }},
      {"seed", [](EngineArgs& a, const py::handle& v) { set_from(a.seed, v); }},
      {"num_threads", [](EngineArgs& a, const py::handle& v) { set_from(a.num_threads, v); }},
      {"cpu_bind", [](EngineArgs& a, const py::handle& v) { set_from(a.cpu_bind, v); }},
      {"weights_memory", [](EngineArgs& a, const py::handle& v) { set_from(a.weights_memory, v); }},
      {"quantization", [](EngineArgs& a, const py::handle& v) { set_from(a.quantization, v); }},
      {"quantization_group_size",
       [](EngineArgs& a, const py::handle& v) { set_from(a.quantization_group_size, v); }},
      {"fp8_weights", [](EngineArgs& a, const py::handle& v) { set_from(a.fp8_weights, v); }},
      {"int8_activations",
       [](EngineArgs& a, const py::handle& v) { set_from(a.int8_activations, v); }},
      {"speculative_config",
       [](EngineArgs& a, const py::handle& v) { set_from(a.speculative_config, v); }},
      {"tensor_parallel_size",
       [](EngineArgs& a, const py::handle& v) { set_from(a.tensor_parallel_size, v); }},
      {"pipeline_parallel_size",
       [](EngineArgs& a, const py::handle& v) { set_from(a.pipeline_parallel_size, v); }},
      {"tensor_parallel_rank",
       [](EngineArgs& a, const py::handle& v) { set_from(a.tensor_parallel_rank, v); }},
      {"tensor_parallel_job_id",
       [](EngineArgs& a, const py::handle& v) { set_from(a.tensor_parallel_job_id, v); }},
  };
  return setters;
}

template <typename T>
std::optional<T> optional_attr(const py::handle& object, const char* name) {
  py::object value = object.attr(name);
  if (value.is_none()) return std::nullopt;
  return value.cast<T>();
}

}  // namespace

EngineArgs engine_args_from_dict(const py::dict& values) {
  EngineArgs args;
  for (const auto& [key, value] : values) {
    const std::string name = key.cast<std::string>();
    const auto setter = engine_arg_setters().find(name);
    if (setter == engine_arg_setters().end()) throw py::key_error("no engine argument " + name);
    setter->second(args, value);
  }
  return args;
}

SamplingParams sampling_params_from_object(const py::handle& params) {
  SamplingParams p;
  p.n = params.attr("n").cast<int>();
  p.temperature = params.attr("temperature").cast<float>();
  p.top_p = params.attr("top_p").cast<float>();
  p.top_k = params.attr("top_k").cast<int>();
  p.min_p = params.attr("min_p").cast<float>();
  p.presence_penalty = params.attr("presence_penalty").cast<float>();
  p.frequency_penalty = params.attr("frequency_penalty").cast<float>();
  p.repetition_penalty = params.attr("repetition_penalty").cast<float>();
  p.seed = optional_attr<uint64_t>(params, "seed");
  p.stop = params.attr("stop").cast<std::vector<std::string>>();
  p.stop_token_ids = params.attr("stop_token_ids").cast<std::vector<int32_t>>();
  p.ignore_eos = params.attr("ignore_eos").cast<bool>();
  p.max_tokens = params.attr("max_tokens").cast<int>();
  p.min_tokens = params.attr("min_tokens").cast<int>();
  p.logprobs = optional_attr<int>(params, "logprobs");
  p.prompt_logprobs = optional_attr<int>(params, "prompt_logprobs");
  p.skip_special_tokens = params.attr("skip_special_tokens").cast<bool>();
  p.include_stop_str_in_output = params.attr("include_stop_str_in_output").cast<bool>();
  p.logit_bias = optional_attr<std::map<int32_t, float>>(params, "logit_bias")
                     .value_or(std::map<int32_t, float>{});
  p.allowed_token_ids = optional_attr<std::vector<int32_t>>(params, "allowed_token_ids");
  p.bad_words = optional_attr<std::vector<std::string>>(params, "bad_words")
                    .value_or(std::vector<std::string>{});
  return p;
}

EngineHandle::EngineHandle(const py::dict& args) {
  const EngineArgs engine_args = engine_args_from_dict(args);
  // Loading reads gigabytes: let other threads run meanwhile.
  py::gil_scoped_release release;
  engine_ = std::make_unique<Engine>(engine_args);
}

void EngineHandle::add_request(const std::string& request_id, const py::object& prompt,
                               const py::object& params, const std::string& output_kind) {
  SamplingParams native = sampling_params_from_object(params);
  if (output_kind == "cumulative") {
    native.output_kind = RequestOutputKind::kCumulative;
  } else if (output_kind == "delta") {
    native.output_kind = RequestOutputKind::kDelta;
  } else if (output_kind == "final_only") {
    native.output_kind = RequestOutputKind::kFinalOnly;
  } else {
    throw py::value_error("output_kind must be cumulative, delta or final_only, got " +
                          output_kind);
  }
  if (py::isinstance<py::str>(prompt)) {
    const std::string text = prompt.cast<std::string>();
    py::gil_scoped_release release;  // tokenizing a long prompt takes a while
    engine_->add_request(request_id, text, native);
  } else {
    std::vector<int32_t> ids = prompt.cast<std::vector<int32_t>>();
    py::gil_scoped_release release;
    engine_->add_request_tokens(request_id, std::move(ids), native);
  }
  unfinished_ids_.insert(request_id);
}

void EngineHandle::abort_request(const std::string& request_id) {
  engine_->abort_request(request_id);
  unfinished_ids_.erase(request_id);
}

void EngineHandle::abort_all() {
  for (const std::string& id : unfinished_ids_) engine_->abort_request(id);
  unfinished_ids_.clear();
}

void EngineHandle::forget_finished(const std::vector<RequestOutput>& outputs) {
  for (const RequestOutput& out : outputs) {
    if (out.finished) unfinished_ids_.erase(out.request_id);
  }
}

bool EngineHandle::has_unfinished_requests() const {
  return engine_->has_unfinished_requests();
}

std::vector<RequestOutput> EngineHandle::step() {
  std::vector<RequestOutput> outputs;
  {
    py::gil_scoped_release release;
    outputs = engine_->step();
  }
  forget_finished(outputs);
  return outputs;
}

std::vector<RequestOutput> EngineHandle::run_to_completion() {
  // The GIL comes back only every kSignalCheckInterval, to look for Ctrl-C: taking it after
  // every step would wait up to the interpreter's switch interval (5 ms) each time another
  // Python thread is running.
  constexpr auto kSignalCheckInterval = std::chrono::milliseconds(100);
  std::vector<RequestOutput> finished;
  bool done = false;
  while (!done) {
    {
      py::gil_scoped_release release;
      const auto check_at = std::chrono::steady_clock::now() + kSignalCheckInterval;
      while (!(done = !engine_->has_unfinished_requests()) &&
             std::chrono::steady_clock::now() < check_at) {
        for (RequestOutput& out : engine_->step()) {
          if (out.finished) {
            unfinished_ids_.erase(out.request_id);
            finished.push_back(std::move(out));
          }
        }
      }
    }
    if (PyErr_CheckSignals() != 0) {
      // Leave the engine empty for the next call, then let the KeyboardInterrupt through.
      abort_all();
      throw py::error_already_set();
    }
  }
  return finished;
}

}  // namespace pagoda::python
