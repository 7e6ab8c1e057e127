// One /v1/completions or /v1/chat/completions request in flight: it submits one engine request
// per prompt, turns the engine's cumulative outputs into OpenAI choices — a whole response, or
// SSE chunks as they come — and aborts what is left when the client goes away.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pagoda/async_engine.h"
#include "server/openai_protocol.h"
#include "server/reasoning_parser.h"
#include "server/tool_choice.h"

namespace pagoda::server {

struct JobSpec {
  bool chat = false;
  std::string id;     // "cmpl-…" or "chatcmpl-…"; engine request ids are "<id>-<prompt index>"
  std::string model;  // as reported in responses
  int64_t created = 0;
  int n = 1;
  bool echo = false;  // completions: prepend the prompt text
  // echo with max_tokens 0 (vLLM's "echo without generation"): the engine still samples one
  // token, because a request must generate, but the response shows only the prompt.
  bool echo_only = false;
  std::vector<std::string> prompt_texts;  // for echo
  // echo with logprobs: the text of each prompt's first token, which has no logprob.
  std::vector<std::string> first_prompt_tokens;
  std::optional<int> logprobs;   // top-N per token; chat: set when logprobs is true
  bool prompt_logprobs = false;  // completions: the engine computes prompt logprobs
  bool include_usage = false;    // streamed: a final usage chunk
  // streamed, with include_usage: every chunk carries its choice's usage so far
  bool continuous_usage = false;
  bool reasoning = false;                   // chat: split <think>…</think> into reasoning_content
  bool stream = false;                      // SSE chunks as outputs come, instead of one response
  std::string response_role = "assistant";  // chat: see chat_response_role()
  bool tokens_as_ids = false;               // logprob tokens as "token_id:N"
  // chat with tools: how the output is read into tool calls (see tool_choice.h).
  ToolChoice tool_choice;
  std::string tool_call_parser;  // --tool-call-parser, for tool_choice auto
  bool parallel_tool_calls = true;
};

class GenerationJob {
 public:
  GenerationJob(AsyncEngine& engine, JobSpec spec);
  ~GenerationJob();

  // Submits prompts[i] with params[i] and returns without waiting for the engine. Throws
  // RequestError (after aborting those already submitted) when it refuses at once: loading,
  // draining, or a full queue.
  void submit(std::vector<std::vector<int32_t>> prompts, const std::vector<SamplingParams>& params);

  // What one poll() found.
  struct Progress {
    std::optional<ApiError> refused;  // the engine refused a prompt: answer with this, nothing more
    bool accepted = false;            // every prompt was accepted: the response may begin
    std::string sse;                  // streamed: the chunks this poll made
    bool done = false;                // every choice finished (streamed: sse ends with [DONE])
  };
  // Applies whatever the engine sent since the last poll; never waits. The queue's listener
  // (set_listener) says when there is something to poll for.
  Progress poll();
  // Non-streamed, once done: the response body. Throws RequestError if the engine failed.
  json response() const;
  bool done() const { return done_; }
  bool streamed() const { return spec_.stream; }
  OutputQueue& queue() { return *queue_; }

  // Aborts the engine requests that have not finished (client disconnect).
  void abort_unfinished();

 private:
  struct Choice {
    size_t text_offset = 0;  // bytes of text before the next logprob token
    bool role_sent = false;
    bool finished = false;
    std::string finish_reason;
    std::optional<std::string> stop_reason;
    std::string text;  // cumulative text (the outputs are deltas)
    std::vector<GeneratedTokenLogprobs> logprobs;
    int64_t num_tokens = 0;
    ReasoningParser reasoning;
    std::unique_ptr<ToolCallParser> tools;  // streamed chat with tools: reads the content
    int num_tool_calls = 0;                 // streamed so far
  };
  struct Tag {
    std::string request_id;
    int64_t num_prompt_tokens = 0;
    bool finished = false;
    std::vector<int32_t> prompt_token_ids;
    // Copied from the engine's outputs until complete (the engine fills them during prefill).
    std::vector<std::optional<GeneratedTokenLogprobs>> prompt_logprobs;
    bool prompt_logprobs_complete = false;
  };

  // Applies one engine event; appends SSE chunks to `sse` when streaming.
  void apply(const EngineEvent& event, std::string* sse);
  void append_chunks(int tag, const RequestOutput& output, std::string* sse);
  // echo with logprobs: the prompt's positions go first, the first one unscored (vLLM's shape).
  void add_prompt_logprobs(int tag, CompletionLogprobs& out) const;
  json completion_chunk(int index, std::string text, json logprobs, const Choice& c) const;
  json chat_chunk(int index, json delta, json logprobs, const Choice& c) const;
  // Streamed chat with tools: feeds `content` to the choice's tool parser and puts what it gives
  // into `delta` (content, tool_calls).
  void add_tool_deltas(Choice& c, const std::string& content, json& delta) const;
  // A whole chat answer with tools: `content` read into the message's content and tool_calls.
  void add_tool_calls(const std::string& content, json& message, bool* called) const;
  // "tool_calls" for a choice that ended normally after making calls.
  static std::string finish_reason(const Choice& c, bool called);
  // A chunk's "usage": null, or with continuous_usage the choice's prompt and tokens so far.
  json chunk_usage(int index, const Choice& c) const;
  Usage usage() const;
  json final_response() const;
  // Streamed: the usage chunk (if asked for) and [DONE], or the error event and [DONE].
  std::string stream_tail() const;

  AsyncEngine& engine_;
  JobSpec spec_;
  std::shared_ptr<OutputQueue> queue_;
  std::vector<Tag> tags_;
  std::vector<Choice> choices_;       // tag * n + sample index
  std::vector<EngineEvent> backlog_;  // outputs that came before every prompt was accepted
  size_t num_unfinished_tags_ = 0;
  size_t num_answered_tags_ = 0;  // accepted or refused by the engine
  bool accepted_ = false;
  bool done_ = false;
  std::optional<ApiError> failure_;
};

}  // namespace pagoda::server
