// EngineHandle: the Python module's view of one pagoda::Engine. It converts Python values to the
// public C++ types (EngineArgs, SamplingParams) and runs the engine with the GIL released, so
// other Python threads run while a batch generates. Only include/pagoda/ is used: the module
// links libpagoda.so like any other program.
#pragma once

#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include <pybind11/pybind11.h>

#include "pagoda/engine.h"

namespace pagoda::python {

namespace py = pybind11;

// EngineArgs from a dict of field name -> value (the LLM constructor's keywords, already in
// the engine's names and units); an unknown name is a KeyError.
EngineArgs engine_args_from_dict(const py::dict& values);

// SamplingParams from any object with vLLM's attribute names (pagoda.SamplingParams).
SamplingParams sampling_params_from_object(const py::handle& params);

class EngineHandle {
 public:
  explicit EngineHandle(const py::dict& args);

  // prompt: a str (tokenized with BOS as the model's config says) or a list of token ids.
  // output_kind: "cumulative", "delta" or "final_only" (RequestOutputKind).
  void add_request(const std::string& request_id, const py::object& prompt,
                   const py::object& params, const std::string& output_kind);
  void abort_request(const std::string& request_id);
  // Aborts every request not yet finished (a generator closed early, Ctrl-C).
  void abort_all();
  bool has_unfinished_requests() const;
  // One scheduler step and forward pass; the outputs of the requests that progressed.
  std::vector<RequestOutput> step();
  // Steps until every request finished and returns the final outputs. Between steps it takes
  // the GIL for a moment to look for Ctrl-C; then it aborts what is left and raises.
  std::vector<RequestOutput> run_to_completion();

  Engine& engine() { return *engine_; }
  const Engine& engine() const { return *engine_; }

 private:
  void forget_finished(const std::vector<RequestOutput>& outputs);

  std::unique_ptr<Engine> engine_;
  std::unordered_set<std::string> unfinished_ids_;  // added and not yet reported finished
};

}  // namespace pagoda::python
