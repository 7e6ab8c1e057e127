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

#include "server/async_engine.h"
#include "server/openai_protocol.h"
#include "server/reasoning_parser.h"

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
  std::string response_role = "assistant";  // chat: see chat_response_role()
  bool tokens_as_ids = false;               // logprob tokens as "token_id:N"
};

class GenerationJob {
 public:
  GenerationJob(AsyncEngine& engine, JobSpec spec);
  ~GenerationJob();

  // Submits prompts[i] with params[i] and waits until the engine accepted all of them. Throws
  // RequestError (after aborting the accepted ones) when one is refused or the queue is full.
  void start(std::vector<std::vector<int32_t>> prompts, const std::vector<SamplingParams>& params);

  // Non-streamed: waits for every choice to finish and returns the response body. While it
  // waits it asks `client_gone` (if set) a few times a second; once that says the client left,
  // it aborts the engine requests (their KV blocks are freed at once) and throws RequestError.
  json wait_response(const std::function<bool()>& client_gone = {});

  // Streamed: waits up to `timeout` for progress and returns the SSE text it makes (possibly
  // empty); after the last choice finishes it also returns the usage chunk and [DONE].
  std::string next_sse(std::chrono::milliseconds timeout);
  bool done() const { return done_; }

  // Aborts the engine requests that have not finished (client disconnect).
  void abort_unfinished();

 private:
  struct Choice {
    size_t sent_text_bytes = 0;
    size_t sent_logprobs = 0;
    size_t text_offset = 0;  // bytes of text before the next logprob token
    bool role_sent = false;
    bool finished = false;
    std::string finish_reason;
    std::optional<std::string> stop_reason;
    std::string text;  // final cumulative text
    std::vector<GeneratedTokenLogprobs> logprobs;
    int64_t num_tokens = 0;
    ReasoningParser reasoning;
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
  // A chunk's "usage": null, or with continuous_usage the choice's prompt and tokens so far.
  json chunk_usage(int index, const Choice& c) const;
  Usage usage() const;
  json final_response() const;

  AsyncEngine& engine_;
  JobSpec spec_;
  std::shared_ptr<OutputQueue> queue_;
  std::vector<Tag> tags_;
  std::vector<Choice> choices_;       // tag * n + sample index
  std::vector<EngineEvent> backlog_;  // outputs that came while start() waited for acceptance
  size_t num_unfinished_tags_ = 0;
  bool done_ = false;
  std::optional<ApiError> failure_;
};

}  // namespace pagoda::server
