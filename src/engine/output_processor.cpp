#include "engine/output_processor.h"

#include "util/clock.h"

namespace pagoda {

OutputProcessor::OutputProcessor(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

void OutputProcessor::add_request(const std::string& request_id,
                                  const std::vector<Request>& samples, const SamplingParams& params,
                                  double arrival_time_s) {
  Parent parent;
  parent.kind = params.output_kind;
  parent.output.request_id = request_id;
  const auto prompt = samples.front().prompt_token_ids();
  parent.output.prompt_token_ids.assign(prompt.begin(), prompt.end());
  parent.output.metrics.arrival_time_s = arrival_time_s;
  parent.output.outputs.resize(samples.size());
  if (params.prompt_logprobs) parent.output.prompt_logprobs.resize(prompt.size());
  for (size_t i = 0; i < samples.size(); ++i) {
    const Request& r = samples[i];
    Sample sample;
    sample.parent_id = request_id;
    sample.index = static_cast<int32_t>(i);
    sample.decoder = std::make_unique<IncrementalDecoder>(
        tokenizer_, r.sampling_params.skip_special_tokens, r.prompt_token_ids());
    sample.stop = std::make_unique<StopStringMatcher>(r.sampling_params);
    sample.wants_logprobs = r.sampling_params.logprobs.has_value();
    sample.keep_stop_token_text = r.sampling_params.include_stop_str_in_output;
    parent.output.outputs[i].index = sample.index;
    parent.sample_ids.push_back(r.request_id);
    samples_.emplace(r.request_id, std::move(sample));
  }
  parents_.emplace(request_id, std::move(parent));
}

std::vector<std::string> OutputProcessor::abort_request(const std::string& request_id) {
  std::vector<std::string> aborted;
  auto it = parents_.find(request_id);
  if (it == parents_.end()) return aborted;
  Parent& parent = it->second;
  for (const std::string& id : parent.sample_ids) {
    Sample& sample = samples_.at(id);
    if (sample.done) continue;
    CompletionOutput& out = parent.output.outputs[static_cast<size_t>(sample.index)];
    out.finish_reason = "abort";
    sample.done = true;
    aborted.push_back(id);
  }
  parent.touched = true;
  return aborted;
}

void OutputProcessor::remove_request(const std::string& request_id) {
  auto it = parents_.find(request_id);
  if (it == parents_.end()) return;
  for (const std::string& id : it->second.sample_ids) samples_.erase(id);
  parents_.erase(it);
}

std::string OutputProcessor::token_text(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= tokenizer_.vocab_size()) return "";
  const int32_t ids[1] = {id};
  return tokenizer_.decode(ids, false);
}

GeneratedTokenLogprobs OutputProcessor::to_public(const PositionLogprobs& lp) const {
  GeneratedTokenLogprobs out;
  out.chosen = {lp.chosen.token_id, token_text(lp.chosen.token_id), lp.chosen.logprob,
                lp.chosen.rank};
  out.top.reserve(lp.top.size());
  for (const LogprobEntry& t : lp.top)
    out.top.push_back({t.token_id, token_text(t.token_id), t.logprob, t.rank});
  return out;
}

void OutputProcessor::append_token(Sample& sample, CompletionOutput& out, int32_t token_id,
                                   const PositionLogprobs* logprobs, bool cumulative, bool decode) {
  // A step may bring several tokens (accepted speculative drafts): none after the one that
  // completed a stop string belongs to the output.
  if (sample.stop->stopped()) return;
  if (sample.wants_logprobs && logprobs != nullptr) out.logprobs.push_back(to_public(*logprobs));
  if (cumulative) out.token_ids.push_back(token_id);
  out.delta_token_ids.push_back(token_id);
  ++num_generation_tokens_;
  if (!decode) return;
  const StopStringMatcher::PushResult pushed = sample.stop->push(sample.decoder->step(token_id));
  out.delta_text += pushed.text;
}

void OutputProcessor::finish_sample(Sample& sample, CompletionOutput& out, RequestStatus status) {
  if (sample.done) return;
  sample.done = true;
  if (sample.stop->stopped()) {
    out.finish_reason = "stop";
    out.stop_reason = sample.stop->stop_reason();
    return;
  }
  const StopStringMatcher::PushResult pushed = sample.stop->push(sample.decoder->finish());
  out.delta_text += pushed.text;
  if (pushed.stopped) {
    out.finish_reason = "stop";
    out.stop_reason = sample.stop->stop_reason();
  } else {
    out.delta_text += sample.stop->flush();
    out.finish_reason = std::string(finish_reason_name(status));
  }
}

OutputProcessor::Result OutputProcessor::process_outputs(const EngineCoreOutputs& core) {
  Result result;
  for (const std::string& id : core.first_scheduled_request_ids) {
    auto sample = samples_.find(id);
    if (sample == samples_.end()) continue;
    RequestMetrics& m = parents_.at(sample->second.parent_id).output.metrics;
    if (m.first_scheduled_time_s == 0) m.first_scheduled_time_s = core.scheduled_time_s;
  }
  for (const EngineCoreOutput& o : core.outputs) {
    auto sample_it = samples_.find(o.request_id);
    if (sample_it == samples_.end()) continue;  // aborted since it was scheduled
    Sample& sample = sample_it->second;
    Parent& parent = parents_.at(sample.parent_id);
    if (o.prompt_logprobs) {
      const PromptLogprobsChunk& chunk = *o.prompt_logprobs;
      for (size_t k = 0; k < chunk.positions.size(); ++k) {
        parent.output.prompt_logprobs[static_cast<size_t>(chunk.first_position) + k] =
            to_public(chunk.positions[k]);
      }
    }
    if (sample.done) continue;
    CompletionOutput& out = parent.output.outputs[static_cast<size_t>(sample.index)];
    const bool cumulative = parent.kind != RequestOutputKind::kDelta;
    // The scheduler ends a request with kFinishedStopped on an EOS or stop token id, which is
    // then the last new token.
    const bool stop_token_last =
        o.status == RequestStatus::kFinishedStopped && !sample.keep_stop_token_text;
    for (size_t k = 0; k < o.new_token_ids.size(); ++k) {
      append_token(sample, out, o.new_token_ids[k],
                   k < o.new_logprobs.size() ? &o.new_logprobs[k] : nullptr, cumulative,
                   !(stop_token_last && k + 1 == o.new_token_ids.size()));
    }
    parent.output.num_cached_tokens = o.num_cached_tokens;
    if (!o.new_token_ids.empty()) {
      parent.touched = true;
      RequestMetrics& m = parent.output.metrics;
      if (m.first_token_time_s == 0) m.first_token_time_s = core.computed_time_s;
      m.last_token_time_s = core.computed_time_s;
    }
    if (o.finished()) {
      parent.touched = true;
      finish_sample(sample, out, o.status);
    } else if (sample.stop->stopped()) {
      finish_sample(sample, out, RequestStatus::kFinishedStopped);
      result.stopped_request_ids.push_back(o.request_id);
    }
  }

  // Report every request with news; retire the ones whose samples all finished.
  std::vector<std::string> retired;
  for (auto& [id, parent] : parents_) {
    if (!parent.touched) continue;
    parent.touched = false;
    bool all_done = true;
    for (const std::string& sample_id : parent.sample_ids) all_done &= samples_.at(sample_id).done;
    if (all_done) parent.output.metrics.finished_time_s = steady_seconds();
    if (parent.kind != RequestOutputKind::kFinalOnly || all_done) {
      result.outputs.push_back(emit(parent, all_done));
    }
    if (all_done) retired.push_back(id);
  }
  for (const std::string& id : retired) {
    for (const std::string& sample_id : parents_.at(id).sample_ids) samples_.erase(sample_id);
    parents_.erase(id);
  }
  return result;
}

RequestOutput OutputProcessor::emit(Parent& parent, bool finished) {
  parent.output.finished = finished;
  if (parent.kind != RequestOutputKind::kDelta) {
    for (CompletionOutput& out : parent.output.outputs) out.text += out.delta_text;
    RequestOutput copy = parent.output;
    for (CompletionOutput& out : parent.output.outputs) {
      out.delta_text.clear();
      out.delta_token_ids.clear();
    }
    return copy;
  }
  // Delta: hand over what accumulated since the previous output and start afresh.
  RequestOutput delta;
  delta.request_id = parent.output.request_id;
  delta.num_cached_tokens = parent.output.num_cached_tokens;
  delta.finished = finished;
  delta.metrics = parent.output.metrics;
  if (!parent.sent_first) {
    delta.prompt_token_ids = parent.output.prompt_token_ids;
    delta.prompt_logprobs = std::move(parent.output.prompt_logprobs);
    parent.output.prompt_logprobs.clear();
    parent.sent_first = true;
  }
  delta.outputs.reserve(parent.output.outputs.size());
  parent.finish_sent.resize(parent.output.outputs.size(), false);
  for (CompletionOutput& out : parent.output.outputs) {
    CompletionOutput d;
    d.index = out.index;
    d.text = out.delta_text;
    d.delta_text = std::move(out.delta_text);
    d.token_ids = out.delta_token_ids;
    d.delta_token_ids = std::move(out.delta_token_ids);
    d.logprobs = std::move(out.logprobs);
    // A sample's finish goes out once, in the output that ends it.
    if (!parent.finish_sent[static_cast<size_t>(out.index)]) {
      d.finish_reason = out.finish_reason;
      d.stop_reason = out.stop_reason;
      parent.finish_sent[static_cast<size_t>(out.index)] = out.finished();
    }
    out.delta_text.clear();
    out.delta_token_ids.clear();
    out.logprobs.clear();
    delta.outputs.push_back(std::move(d));
  }
  return delta;
}

}  // namespace pagoda
