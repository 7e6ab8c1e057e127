// The back of the engine: turns the engine core's per-step ids into the caller's
// RequestOutputs. Per sample it detokenizes incrementally, matches stop strings (a match ends
// the sample here and the engine tells the core to stop it), and writes logprob texts; per
// request it gathers the n samples and emits cumulative, delta or final-only outputs as the
// request's output_kind says. After vLLM v1's OutputProcessor.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/engine_core_output.h"
#include "engine/request.h"
#include "pagoda/engine.h"
#include "sampling/stop_strings.h"
#include "tokenizer/incremental_decoder.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

class OutputProcessor {
 public:
  // `tokenizer` must outlive the processor.
  explicit OutputProcessor(const Tokenizer& tokenizer);

  bool has_request(const std::string& request_id) const { return parents_.contains(request_id); }
  // Requests added and not yet reported finished.
  size_t num_requests() const { return parents_.size(); }

  // Tracks a request whose samples (InputProcessor::process) the core now holds.
  void add_request(const std::string& request_id, const std::vector<Request>& samples,
                   const SamplingParams& params, double arrival_time_s);
  // Ends every unfinished sample of the request with finish_reason "abort" (reported by the
  // next process_outputs) and returns their ids, for the core to finish. Unknown ids: none.
  std::vector<std::string> abort_request(const std::string& request_id);
  // Forgets a request without reporting it (the core refused it).
  void remove_request(const std::string& request_id);

  struct Result {
    std::vector<RequestOutput> outputs;
    // Samples that matched a stop string this step: the core must stop them.
    std::vector<std::string> stopped_request_ids;
  };
  Result process_outputs(const EngineCoreOutputs& core_outputs);

  int64_t num_generation_tokens() const { return num_generation_tokens_; }

 private:
  // One generated sequence (one of a request's n samples).
  struct Sample {
    std::string parent_id;
    int32_t index = 0;
    std::unique_ptr<IncrementalDecoder> decoder;
    std::unique_ptr<StopStringMatcher> stop;
    bool wants_logprobs = false;
    // include_stop_str_in_output: the EOS or stop token id that ends the output is detokenized
    // too (vLLM's rule); otherwise its text, e.g. "<｜end▁of▁sentence｜>" with
    // skip_special_tokens false, never reaches the output.
    bool keep_stop_token_text = false;
    bool done = false;
  };
  // What the caller asked for: the prompt and its n outputs. For kDelta outputs, each
  // CompletionOutput holds only what is new since the previous RequestOutput.
  struct Parent {
    RequestOutput output;
    RequestOutputKind kind = RequestOutputKind::kCumulative;
    std::vector<std::string> sample_ids;
    bool touched = false;           // has news for the caller this step
    bool sent_first = false;        // kDelta: the prompt (and its logprobs) went out already
    std::vector<bool> finish_sent;  // kDelta: per sample, its finish went out already
  };

  // `decode` false: the token counts (ids, logprobs) but adds no text.
  void append_token(Sample& sample, CompletionOutput& out, int32_t token_id,
                    const PositionLogprobs* logprobs, bool cumulative, bool decode);
  void finish_sample(Sample& sample, CompletionOutput& out, RequestStatus status);
  GeneratedTokenLogprobs to_public(const PositionLogprobs& lp) const;
  std::string token_text(int32_t id) const;
  // The RequestOutput the caller gets for a touched parent, per its kind.
  RequestOutput emit(Parent& parent, bool finished);

  const Tokenizer& tokenizer_;
  std::unordered_map<std::string, Sample> samples_;
  std::unordered_map<std::string, Parent> parents_;
  int64_t num_generation_tokens_ = 0;
};

}  // namespace pagoda
