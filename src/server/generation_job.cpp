// Turning engine outputs into OpenAI responses and SSE chunks; see generation_job.h.
#include "server/generation_job.h"

#include <algorithm>

namespace pagoda::server {
namespace {

// What an echo-only request shows of an engine output: the one sampled token is dropped and a
// finished choice ends on its length limit, as vLLM reports it.
CompletionOutput without_generation(const CompletionOutput& o) {
  CompletionOutput hidden;
  hidden.index = o.index;
  if (!o.finish_reason.empty())
    hidden.finish_reason = o.finish_reason == "abort" ? o.finish_reason : "length";
  return hidden;
}

// An engine event's error as the client sees it: a refused request is the client's (400), an
// engine that stopped is unavailable (503), one that failed is the server's (500).
ApiError api_error(const EngineEventError& e) {
  switch (e.kind) {
    case EngineEventError::Kind::kUnavailable:
      return service_unavailable_error(e.message);
    case EngineEventError::Kind::kFailed: {
      ApiError err;
      err.status = 500;
      err.type = "InternalServerError";
      err.message = e.message;
      return err;
    }
    case EngineEventError::Kind::kRejected:
      break;
  }
  ApiError err;
  err.message = e.message;
  return err;
}

}  // namespace

GenerationJob::GenerationJob(AsyncEngine& engine, JobSpec spec)
    : engine_(engine), spec_(std::move(spec)), queue_(std::make_shared<OutputQueue>()) {}

GenerationJob::~GenerationJob() {
  // Whatever way the HTTP side left (disconnect, exception), no engine request outlives its job.
  if (!done_) abort_unfinished();
}

void GenerationJob::abort_unfinished() {
  for (const Tag& t : tags_) {
    if (!t.finished) engine_.abort(t.request_id);
  }
}

void GenerationJob::submit(std::vector<std::vector<int32_t>> prompts,
                           const std::vector<SamplingParams>& params) {
  const size_t num_prompts = prompts.size();
  tags_.resize(num_prompts);
  choices_.resize(num_prompts * static_cast<size_t>(spec_.n));
  num_unfinished_tags_ = num_prompts;
  if (spec_.chat && spec_.stream) {
    for (Choice& c : choices_)
      c.tools = make_choice_parser(spec_.tool_choice, spec_.tool_call_parser);
  }
  size_t num_submitted = 0;
  try {
    for (size_t i = 0; i < num_prompts; ++i) {
      tags_[i].request_id = spec_.id + "-" + std::to_string(i);
      tags_[i].num_prompt_tokens = static_cast<int64_t>(prompts[i].size());
      engine_.submit(
          {tags_[i].request_id, std::move(prompts[i]), params[i], static_cast<int>(i), queue_});
      ++num_submitted;
    }
  } catch (const EngineUnavailableError& e) {
    for (size_t i = 0; i < num_submitted; ++i) engine_.abort(tags_[i].request_id);
    done_ = true;
    throw RequestError(service_unavailable_error(e.what()));
  }
}

GenerationJob::Progress GenerationJob::poll() {
  Progress progress;
  if (done_) {
    progress.accepted = accepted_;
    progress.done = true;
    return progress;
  }
  std::vector<EngineEvent> events;
  queue_->pop_all(events, std::chrono::milliseconds(0));
  if (!accepted_) {
    // Every submitted request is answered by kAccepted or kError (also when the engine stops);
    // outputs wait in the backlog until all are in, so that a refusal can still be an error
    // status instead of a broken stream.
    std::optional<ApiError> refused;
    for (EngineEvent& e : events) {
      if (e.kind == EngineEvent::Kind::kAccepted) {
        ++num_answered_tags_;
      } else if (e.kind == EngineEvent::Kind::kError && !tags_[e.tag].finished) {
        ++num_answered_tags_;
        tags_[e.tag].finished = true;
        --num_unfinished_tags_;
        if (!refused) refused = api_error(e.error);
      } else {
        backlog_.push_back(std::move(e));
      }
    }
    if (refused) {
      abort_unfinished();
      done_ = true;
      progress.refused = refused;
      progress.done = true;
      return progress;
    }
    if (num_answered_tags_ < tags_.size()) return progress;
    accepted_ = true;
    events.swap(backlog_);
    backlog_.clear();
  }
  progress.accepted = true;
  std::string* sse = spec_.stream ? &progress.sse : nullptr;
  for (const EngineEvent& e : events) apply(e, sse);
  if (failure_ || num_unfinished_tags_ == 0) {
    done_ = true;
    if (spec_.stream) progress.sse += stream_tail();
  }
  progress.done = done_;
  return progress;
}

std::string GenerationJob::stream_tail() const {
  if (failure_) return sse_event(error_json(*failure_)) + std::string(kSseDone);
  std::string sse;
  if (spec_.include_usage) {
    sse += sse_event({{"id", spec_.id},
                      {"object", spec_.chat ? "chat.completion.chunk" : "text_completion"},
                      {"created", spec_.created},
                      {"model", spec_.model},
                      {"choices", json::array()},
                      {"usage", usage_json(usage())}});
  }
  sse += kSseDone;
  return sse;
}

json GenerationJob::response() const {
  if (failure_) throw RequestError(*failure_);
  return final_response();
}

void GenerationJob::apply(const EngineEvent& e, std::string* sse) {
  if (e.tag < 0 || static_cast<size_t>(e.tag) >= tags_.size()) return;
  Tag& tag = tags_[e.tag];
  switch (e.kind) {
    case EngineEvent::Kind::kAccepted:
      return;
    case EngineEvent::Kind::kError:
      if (!tag.finished) {
        tag.finished = true;
        --num_unfinished_tags_;
      }
      if (!failure_) failure_ = api_error(e.error);
      return;
    case EngineEvent::Kind::kOutput:
      if (tag.finished) return;
      append_chunks(e.tag, e.output, sse);
      if (e.output.finished) {
        tag.finished = true;
        --num_unfinished_tags_;
      }
      return;
  }
}

void GenerationJob::add_prompt_logprobs(int tag, CompletionLogprobs& out) const {
  const Tag& t = tags_[static_cast<size_t>(tag)];
  for (size_t i = 0; i < t.prompt_token_ids.size(); ++i) {
    if (i < t.prompt_logprobs.size() && t.prompt_logprobs[i]) {
      out.add(*t.prompt_logprobs[i]);
    } else {
      // The first token (nothing precedes it); later ones only if the request was aborted
      // before its prompt was computed.
      const std::string& first = spec_.first_prompt_tokens[static_cast<size_t>(tag)];
      out.add_unscored(i == 0 ? first : std::string(), t.prompt_token_ids[i]);
    }
  }
}

void GenerationJob::append_chunks(int tag, const RequestOutput& output, std::string* sse) {
  Tag& t = tags_[static_cast<size_t>(tag)];
  if (t.prompt_token_ids.empty()) t.prompt_token_ids = output.prompt_token_ids;
  if (!t.prompt_logprobs_complete && !output.prompt_logprobs.empty()) {
    t.prompt_logprobs = output.prompt_logprobs;
    t.prompt_logprobs_complete = true;
    for (size_t i = 1; i < t.prompt_logprobs.size(); ++i)
      t.prompt_logprobs_complete &= t.prompt_logprobs[i].has_value();
  }
  for (const CompletionOutput& engine_output : output.outputs) {
    CompletionOutput hidden;
    const CompletionOutput& o =
        spec_.echo_only ? (hidden = without_generation(engine_output)) : engine_output;
    const size_t index = static_cast<size_t>(tag) * spec_.n + static_cast<size_t>(o.index);
    if (o.index < 0 || o.index >= spec_.n || index >= choices_.size()) continue;
    Choice& c = choices_[index];
    if (c.finished) continue;
    // Outputs are deltas (RequestOutputKind::kDelta): what this step added.
    const std::string& new_text = o.text;
    c.text += o.text;
    const bool new_tokens = !o.token_ids.empty();
    c.num_tokens += static_cast<int64_t>(o.token_ids.size());
    const bool new_logprobs = !o.logprobs.empty();
    if (spec_.logprobs) c.logprobs.insert(c.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
    const bool first_chunk = !c.role_sent;
    c.role_sent = true;
    if (!o.finish_reason.empty() || output.finished) {
      c.finished = true;
      c.finish_reason = o.finish_reason.empty() ? "abort" : o.finish_reason;
      c.stop_reason = o.stop_reason;
    }
    if (sse == nullptr) continue;
    const int choice_index = static_cast<int>(index);

    if (!spec_.chat) {
      std::string text = new_text;
      const bool echo_now = spec_.echo && first_chunk;  // vLLM echoes with the first chunk
      if (echo_now) text = spec_.prompt_texts[tag] + text;
      json logprobs = nullptr;
      if (spec_.logprobs && (new_logprobs || echo_now)) {
        CompletionLogprobs lps(*spec_.logprobs, c.text_offset, spec_.tokens_as_ids);
        if (echo_now) add_prompt_logprobs(tag, lps);
        for (const GeneratedTokenLogprobs& lp : o.logprobs) lps.add(lp);
        c.text_offset = lps.text_offset();
        logprobs = lps.to_json();
      }
      // Like vLLM, a step that produced tokens gets a chunk even when their text is still empty
      // (a partial UTF-8 character, a special token), so clients can time every token.
      if (text.empty() && logprobs.is_null() && !c.finished && !new_tokens) continue;
      *sse += sse_event(completion_chunk(choice_index, std::move(text), std::move(logprobs), c));
      continue;
    }

    if (first_chunk) {
      Choice opening;  // a chunk carrying only the role, never a finish reason
      *sse += sse_event(chat_chunk(choice_index, {{"role", spec_.response_role}, {"content", ""}},
                                   nullptr, opening));
    }
    json delta = json::object();
    if (spec_.reasoning) {
      ReasoningDelta d = c.reasoning.feed(new_text);
      if (c.finished) {
        ReasoningDelta rest = c.reasoning.finish();
        d.reasoning += rest.reasoning;
        d.content += rest.content;
      }
      // `reasoning` as current vLLM sends it, `reasoning_content` for older clients.
      if (!d.reasoning.empty()) delta["reasoning"] = delta["reasoning_content"] = d.reasoning;
      add_tool_deltas(c, d.content, delta);
    } else {
      add_tool_deltas(c, new_text, delta);
    }
    json logprobs = nullptr;
    if (spec_.logprobs && new_logprobs)
      logprobs = chat_logprobs_json(o.logprobs, 0, o.logprobs.size(), spec_.tokens_as_ids);
    if (delta.empty() && logprobs.is_null() && !c.finished) continue;
    *sse += sse_event(chat_chunk(choice_index, std::move(delta), std::move(logprobs), c));
  }
}

void GenerationJob::add_tool_deltas(Choice& c, const std::string& content, json& delta) const {
  if (!c.tools) {
    if (!content.empty()) delta["content"] = content;
    return;
  }
  ToolParseDelta d = c.tools->feed(content);
  if (c.finished) {
    ToolParseDelta rest = c.tools->finish();
    d.content += rest.content;
    d.calls.insert(d.calls.end(), rest.calls.begin(), rest.calls.end());
  }
  if (!d.content.empty()) delta["content"] = d.content;
  json calls = json::array();
  for (const ToolCallPiece& piece : d.calls) {
    // parallel_tool_calls false: the first call only.
    if (!spec_.parallel_tool_calls && piece.index > 0) continue;
    json call = {{"index", piece.index}};
    if (piece.first) {
      ++c.num_tool_calls;
      call["id"] = random_request_id("chatcmpl-tool");
      call["type"] = "function";
      call["function"] = {{"name", piece.name}, {"arguments", piece.arguments}};
    } else {
      call["function"] = {{"arguments", piece.arguments}};
    }
    calls.push_back(std::move(call));
  }
  if (!calls.empty()) delta["tool_calls"] = std::move(calls);
}

void GenerationJob::add_tool_calls(const std::string& content, json& message, bool* called) const {
  *called = false;
  std::unique_ptr<ToolCallParser> parser =
      make_choice_parser(spec_.tool_choice, spec_.tool_call_parser);
  if (!parser) {
    message["content"] = content;
    return;
  }
  ParsedToolOutput out = parse_all(*parser, content);
  if (!spec_.parallel_tool_calls && out.calls.size() > 1) out.calls.resize(1);
  *called = !out.calls.empty();
  message["content"] = *called && out.content.empty() ? json(nullptr) : json(out.content);
  if (!*called) return;
  json calls = json::array();
  for (ParsedToolCall& call : out.calls) {
    calls.push_back({{"id", random_request_id("chatcmpl-tool")},
                     {"type", "function"},
                     {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
  }
  message["tool_calls"] = std::move(calls);
}

std::string GenerationJob::finish_reason(const Choice& c, bool called) {
  return called && c.finish_reason == "stop" ? "tool_calls" : c.finish_reason;
}

json GenerationJob::completion_chunk(int index, std::string text, json logprobs,
                                     const Choice& c) const {
  json choice = {{"index", index},
                 {"text", std::move(text)},
                 {"logprobs", std::move(logprobs)},
                 {"finish_reason", c.finished ? json(c.finish_reason) : json(nullptr)},
                 {"stop_reason", c.stop_reason ? json(*c.stop_reason) : json(nullptr)}};
  json chunk = {{"id", spec_.id},
                {"object", "text_completion"},
                {"created", spec_.created},
                {"model", spec_.model},
                {"choices", json::array({std::move(choice)})}};
  if (spec_.include_usage) chunk["usage"] = chunk_usage(index, c);
  return chunk;
}

json GenerationJob::chat_chunk(int index, json delta, json logprobs, const Choice& c) const {
  json choice = {
      {"index", index},
      {"delta", std::move(delta)},
      {"logprobs", std::move(logprobs)},
      {"finish_reason", c.finished ? json(finish_reason(c, c.num_tool_calls > 0)) : json(nullptr)}};
  json chunk = {{"id", spec_.id},
                {"object", "chat.completion.chunk"},
                {"created", spec_.created},
                {"model", spec_.model},
                {"choices", json::array({std::move(choice)})}};
  if (spec_.include_usage) chunk["usage"] = chunk_usage(index, c);
  return chunk;
}

json GenerationJob::chunk_usage(int index, const Choice& c) const {
  if (!spec_.continuous_usage) return nullptr;
  const size_t tag = static_cast<size_t>(index) / static_cast<size_t>(spec_.n);
  Usage u;
  u.prompt_tokens = tag < tags_.size() ? tags_[tag].num_prompt_tokens : 0;
  u.completion_tokens = c.num_tokens;
  return usage_json(u);
}

Usage GenerationJob::usage() const {
  Usage u;
  for (const Tag& t : tags_) u.prompt_tokens += t.num_prompt_tokens;
  for (const Choice& c : choices_) u.completion_tokens += c.num_tokens;
  return u;
}

json GenerationJob::final_response() const {
  json choices = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    const size_t tag = i / static_cast<size_t>(spec_.n);
    json stop_reason = c.stop_reason ? json(*c.stop_reason) : json(nullptr);
    if (!spec_.chat) {
      const std::string prefix = spec_.echo ? spec_.prompt_texts[tag] : std::string();
      json logprobs = nullptr;
      if (spec_.logprobs) {
        // With echo the offsets count from the prompt's first token, as vLLM's do.
        CompletionLogprobs lps(*spec_.logprobs, 0, spec_.tokens_as_ids);
        if (spec_.echo) add_prompt_logprobs(static_cast<int>(tag), lps);
        for (const GeneratedTokenLogprobs& lp : c.logprobs) lps.add(lp);
        logprobs = lps.to_json();
      }
      choices.push_back({{"index", i},
                         {"text", prefix + c.text},
                         {"logprobs", std::move(logprobs)},
                         {"finish_reason", c.finish_reason},
                         {"stop_reason", std::move(stop_reason)},
                         {"prompt_logprobs", spec_.prompt_logprobs
                                                 ? prompt_logprobs_json(tags_[tag].prompt_logprobs)
                                                 : json(nullptr)}});
      continue;
    }
    json message = {{"role", spec_.response_role}};
    bool called = false;
    if (spec_.reasoning) {
      ReasoningDelta d = ReasoningParser::split(c.text);
      message["reasoning"] = message["reasoning_content"] =
          d.reasoning.empty() ? json(nullptr) : json(d.reasoning);
      add_tool_calls(d.content, message, &called);
      if (message["content"] == "") message["content"] = nullptr;
    } else {
      add_tool_calls(c.text, message, &called);
    }
    choices.push_back(
        {{"index", i},
         {"message", std::move(message)},
         {"logprobs",
          spec_.logprobs ? chat_logprobs_json(c.logprobs, 0, c.logprobs.size(), spec_.tokens_as_ids)
                         : json(nullptr)},
         {"finish_reason", finish_reason(c, called)},
         {"stop_reason", std::move(stop_reason)}});
  }
  return {{"id", spec_.id},
          {"object", spec_.chat ? "chat.completion" : "text_completion"},
          {"created", spec_.created},
          {"model", spec_.model},
          {"choices", std::move(choices)},
          {"usage", usage_json(usage())}};
}

}  // namespace pagoda::server
