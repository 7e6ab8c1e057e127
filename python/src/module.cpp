// pagoda._pagoda: the compiled half of the `pagoda` Python package. It exposes the engine
// (EngineHandle) and its output structs as they are in include/pagoda/engine.h; the vLLM-shaped
// classes users see (LLM, SamplingParams, RequestOutput) are Python, in python/pagoda/.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "engine_handle.h"
#include "pagoda/engine.h"
#include "pagoda/error.h"
#include "pagoda/logging.h"
#include "pagoda/version.h"

namespace py = pybind11;
using namespace pagoda;
using pagoda::python::EngineHandle;

namespace {

// Text the engine produced, as str; a token may end inside a UTF-8 sequence, which must not
// make reading an output fail.
py::str to_str(const std::string& text) {
  return py::reinterpret_steal<py::str>(
      PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "replace"));
}

void bind_outputs(py::module_& m) {
  py::class_<TokenLogprobInfo>(m, "TokenLogprobInfo")
      .def_readonly("token_id", &TokenLogprobInfo::token_id)
      .def_property_readonly("token", [](const TokenLogprobInfo& t) { return to_str(t.token); })
      .def_readonly("logprob", &TokenLogprobInfo::logprob)
      .def_readonly("rank", &TokenLogprobInfo::rank);
  py::class_<GeneratedTokenLogprobs>(m, "GeneratedTokenLogprobs")
      .def_readonly("chosen", &GeneratedTokenLogprobs::chosen)
      .def_readonly("top", &GeneratedTokenLogprobs::top);
  py::class_<CompletionOutput>(m, "CompletionOutput")
      .def_readonly("index", &CompletionOutput::index)
      .def_property_readonly("text", [](const CompletionOutput& o) { return to_str(o.text); })
      .def_readonly("token_ids", &CompletionOutput::token_ids)
      .def_property_readonly("delta_text",
                             [](const CompletionOutput& o) { return to_str(o.delta_text); })
      .def_readonly("delta_token_ids", &CompletionOutput::delta_token_ids)
      .def_readonly("logprobs", &CompletionOutput::logprobs)
      .def_readonly("finish_reason", &CompletionOutput::finish_reason)
      .def_readonly("stop_reason", &CompletionOutput::stop_reason);
  py::class_<RequestMetrics>(m, "RequestMetrics")
      .def_readonly("arrival_time", &RequestMetrics::arrival_time_s)
      .def_readonly("first_scheduled_time", &RequestMetrics::first_scheduled_time_s)
      .def_readonly("first_token_time", &RequestMetrics::first_token_time_s)
      .def_readonly("last_token_time", &RequestMetrics::last_token_time_s)
      .def_readonly("finished_time", &RequestMetrics::finished_time_s);
  py::class_<RequestOutput>(m, "RequestOutput")
      .def_readonly("request_id", &RequestOutput::request_id)
      .def_readonly("prompt_token_ids", &RequestOutput::prompt_token_ids)
      .def_readonly("outputs", &RequestOutput::outputs)
      .def_readonly("prompt_logprobs", &RequestOutput::prompt_logprobs)
      .def_readonly("num_cached_tokens", &RequestOutput::num_cached_tokens)
      .def_readonly("finished", &RequestOutput::finished)
      .def_readonly("metrics", &RequestOutput::metrics);
}

// The engine's defaults (generation_config.json) as keyword arguments for SamplingParams.
py::dict sampling_defaults(const SamplingParams& p) {
  py::dict d;
  d["n"] = p.n;
  d["temperature"] = p.temperature;
  d["top_p"] = p.top_p;
  d["top_k"] = p.top_k;
  d["min_p"] = p.min_p;
  d["presence_penalty"] = p.presence_penalty;
  d["frequency_penalty"] = p.frequency_penalty;
  d["repetition_penalty"] = p.repetition_penalty;
  d["seed"] = p.seed ? py::cast(*p.seed) : py::none();
  d["stop"] = p.stop;
  d["stop_token_ids"] = p.stop_token_ids;
  d["ignore_eos"] = p.ignore_eos;
  d["max_tokens"] = p.max_tokens;
  d["min_tokens"] = p.min_tokens;
  d["skip_special_tokens"] = p.skip_special_tokens;
  d["include_stop_str_in_output"] = p.include_stop_str_in_output;
  return d;
}

void bind_engine(py::module_& m) {
  py::class_<EngineHandle>(m, "Engine")
      .def(py::init<const py::dict&>(), py::arg("args"))
      .def("add_request", &EngineHandle::add_request, py::arg("request_id"), py::arg("prompt"),
           py::arg("params"), py::arg("output_kind"))
      .def("abort_request", &EngineHandle::abort_request, py::arg("request_id"))
      .def("abort_all", &EngineHandle::abort_all)
      .def("has_unfinished_requests", &EngineHandle::has_unfinished_requests)
      .def("step", &EngineHandle::step)
      .def("run_to_completion", &EngineHandle::run_to_completion)
      .def(
          "encode",
          [](const EngineHandle& h, const std::string& text, bool add_special_tokens) {
            py::gil_scoped_release release;
            return h.engine().encode(text, add_special_tokens);
          },
          py::arg("text"), py::arg("add_special_tokens"))
      .def(
          "decode",
          [](const EngineHandle& h, const std::vector<int32_t>& ids, bool skip_special_tokens) {
            return to_str(h.engine().decode(ids, skip_special_tokens));
          },
          py::arg("ids"), py::arg("skip_special_tokens"))
      .def(
          "apply_chat_template",
          [](const EngineHandle& h, const std::string& messages_json, bool add_generation_prompt,
             const std::string& kwargs_json) {
            return h.engine().apply_chat_template(messages_json, add_generation_prompt,
                                                  kwargs_json);
          },
          py::arg("messages_json"), py::arg("add_generation_prompt"), py::arg("kwargs_json"))
      .def("default_sampling_params",
           [](const EngineHandle& h) {
             return sampling_defaults(h.engine().default_sampling_params());
           })
      .def("max_model_len", [](const EngineHandle& h) { return h.engine().max_model_len(); })
      .def("model_name", [](const EngineHandle& h) { return h.engine().model_name(); })
      .def("kv_cache_bytes",
           [](const EngineHandle& h) { return h.engine().cache_info().num_bytes; });
}

}  // namespace

PYBIND11_MODULE(_pagoda, m) {
  m.doc() = "Pagoda's engine (the compiled part of the pagoda package)";
  // pagoda::Error carries the engine's message; most are about what the caller passed (a
  // parameter out of range, a prompt too long, a model directory that is not one), which is
  // what vLLM raises ValueError for.
  py::register_exception<Error>(m, "Error", PyExc_ValueError);
  m.def("version", [] { return std::string(pagoda::version()); });
  m.def("log_to_stderr", &pagoda::log_to_stderr, py::arg("level"));
  // A tensor-parallel follower rank (pagoda._follower): returns when rank 0 shuts down.
  m.def(
      "run_tensor_parallel_follower",
      [](const py::dict& args) {
        const EngineArgs engine_args = python::engine_args_from_dict(args);
        py::gil_scoped_release release;
        run_tensor_parallel_follower(engine_args);
      },
      py::arg("args"));
  bind_outputs(m);
  bind_engine(m);
}
