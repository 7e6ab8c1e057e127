// The OpenAI wire format: parsing and validating /v1/completions, /v1/chat/completions,
// /tokenize and /detokenize bodies into plain structs, and building the JSON responses, SSE
// chunks and errors the official SDKs expect (field names and defaults follow
// platform.openai.com/docs/api-reference and vLLM's protocol.py, including vLLM's extras).
// Nothing here touches the engine or a socket, so every rule is unit-testable.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "pagoda/engine.h"
#include "pagoda/sampling_params.h"
#include "server/tool_choice.h"

namespace pagoda::server {

using nlohmann::json;

// An error in OpenAI's shape: {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty: null
  std::string code;   // empty: null
};

// Thrown by the parsers and the server's request path; the HTTP layer turns it into a response.
class RequestError : public std::runtime_error {
 public:
  explicit RequestError(ApiError error)
      : std::runtime_error(error.message), error_(std::move(error)) {}
  const ApiError& error() const { return error_; }

 private:
  ApiError error_;
};

[[noreturn]] void throw_invalid(std::string message, std::string param = {});
ApiError not_found_error(std::string message);
ApiError service_unavailable_error(std::string message);
json error_json(const ApiError& error);

// The deepest nesting of arrays/objects a body may have; deeper bodies are rejected before parsing.
inline constexpr int kMaxJsonDepth = 32;
inline constexpr int kMaxPromptsPerRequest = 256;
inline constexpr int kMaxSamplesPerRequest = 128;  // n

// Server-wide settings of the wire format: `pagoda serve`'s vLLM flags of the same names.
struct ProtocolOptions {
  // --max-logprobs: the most top-N logprobs (logprobs, top_logprobs, prompt_logprobs) a request
  // may ask for; more is a 400. -1: no limit but the vocabulary (the engine checks that).
  int max_logprobs = 20;
  // --response-role: the role of a chat answer when the request adds a generation prompt.
  std::string response_role = "assistant";
  // --return-tokens-as-token-ids: logprob tokens written "token_id:N", so that a client can
  // tell apart tokens that do not decode to text on their own.
  bool return_tokens_as_token_ids = false;
  // --enable-auto-tool-choice: tool_choice "auto" (the default when tools are sent) is allowed;
  // the --tool-call-parser reads the model's calls. Without it "auto" is a 400, as in vLLM.
  bool enable_auto_tool_choice = false;
  std::string tool_call_parser;  // deepseek_v3, deepseek_v31, hermes; "" none
};

// Parses a request body: must be valid UTF-8 JSON, an object, nested at most kMaxJsonDepth deep.
json parse_json_body(std::string_view body);

// One prompt of a completion request: text, or token ids.
struct Prompt {
  std::optional<std::string> text;
  std::vector<int32_t> token_ids;  // set when the client sent ids
};

struct CompletionRequest {
  std::string model;  // empty: the served model
  std::vector<Prompt> prompts;
  SamplingParams params;          // max_tokens resolved by the server
  std::optional<int> max_tokens;  // as sent
  bool echo = false;
  bool stream = false;
  bool include_usage = false;
  bool continuous_usage = false;  // stream_options.continuous_usage_stats (with include_usage)
  bool add_special_tokens = true;
};

struct ChatRequest {
  std::string model;
  // Array of {role, content, ...}; content is a string or, as sent, a list of text parts
  // [{type: "text", text}] (the engine shapes it for the template: --chat-template-content-format)
  json messages;
  bool add_generation_prompt = true;
  json chat_template_kwargs = json::object();
  SamplingParams params;
  std::optional<int> max_tokens;  // max_completion_tokens or max_tokens, as sent
  bool logprobs = false;          // chat: a bool; top_logprobs sets params.logprobs
  bool stream = false;
  bool include_usage = false;
  bool continuous_usage = false;    // stream_options.continuous_usage_stats (with include_usage)
  bool add_special_tokens = false;  // the chat template already adds BOS
  // The function tools as sent (each checked: type "function", function.name, optional
  // description, parameters and strict), for the chat template; null when none were sent.
  json tools;
  // Default: auto when tools were sent, else none. Forced choices (required, a named function)
  // set params.structured_outputs to their schema (forced_tool_schema).
  ToolChoice tool_choice;
  bool parallel_tool_calls = true;
};

// What a field that no endpoint knows gets. vLLM ignores it with a warning, so that clients
// sending newer or vendor fields (`refusal: null` in history, `cache_salt`, `reasoning_effort`)
// keep working; the server does the same unless --strict-request-fields. A field we know but
// cannot honour (tools, guided_json, ...) is a 400 either way: ignoring it would
// change what the client gets.
struct UnknownFields {
  bool strict = true;
  std::vector<std::string> ignored;  // when not strict, as named in `param`: "messages[1].refusal"
};

// `defaults` carries the model's generation_config.json values (temperature, top_p, ...); the
// request overrides them field by field. Throws RequestError (400) naming the bad field in param.
// `unknown` null: strict.
// `protocol` bounds the logprobs a request may ask for.
CompletionRequest parse_completion_request(const json& body, const SamplingParams& defaults,
                                           UnknownFields* unknown = nullptr,
                                           const ProtocolOptions& protocol = {});
ChatRequest parse_chat_request(const json& body, const SamplingParams& defaults,
                               UnknownFields* unknown = nullptr,
                               const ProtocolOptions& protocol = {});
// The role of the answer, as vLLM picks it: --response-role when the request adds a generation
// prompt, else the role of its last message (the answer continues that message).
std::string chat_response_role(const ChatRequest& request, const ProtocolOptions& protocol);

// Resolves max_tokens (completions: 16 unless sent; chat: the rest of the context) and checks
// that prompt + max_tokens fits; the 400 message says by how many tokens it does not.
int resolve_max_tokens(std::optional<int> requested, int default_max_tokens, int num_prompt_tokens,
                       int max_model_len);
// Runs validate() on the final params, mapping its message to a 400 with `param` set.
void check_sampling_params(const SamplingParams& params);

// /tokenize: {"prompt": str, "add_special_tokens"?} or {"messages": [...], ...}.
struct TokenizeRequest {
  std::string model;
  std::optional<std::string> prompt;
  json messages;  // null unless a chat tokenize
  json tools;     // a chat tokenize's function tools, shown to the template (null: none)
  bool add_generation_prompt = true;
  bool add_special_tokens = true;
  bool return_token_strs = false;  // vLLM's extra: "token_strs" beside "tokens"
};
TokenizeRequest parse_tokenize_request(const json& body, UnknownFields* unknown = nullptr);
// The /tokenize response {"count", "max_model_len", "tokens"} and, when the request asked with
// return_token_strs, "token_strs": token_strs[i] is the text of tokens[i] (what `decode` of that
// one token gives, special tokens kept).
json tokenize_response(const TokenizeRequest& request, const std::vector<int32_t>& tokens,
                       int max_model_len, const std::function<std::string(int32_t)>& token_text);
// /detokenize: {"tokens": [ids]}.
std::vector<int32_t> parse_detokenize_request(const json& body, std::string* model,
                                              UnknownFields* unknown = nullptr);

// ---- responses ----

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};
json usage_json(const Usage& usage);

// Legacy completions logprobs ({tokens, token_logprobs, top_logprobs, text_offset}), built
// position by position the way vLLM's _create_completion_logprobs does: a scored position lists
// its token's logprob and, in top_logprobs, the token itself plus the num_top most likely (at
// most num_top + 1 entries, as OpenAI documents); an unscored one (the first prompt token of an
// echo, which nothing precedes) has null for both. -inf is sent as -9999. text_offset counts
// bytes from `text_offset` on.
// With `tokens_as_ids` (--return-tokens-as-token-ids) every token is written "token_id:N"; the
// text offsets still count the text's bytes.
class CompletionLogprobs {
 public:
  CompletionLogprobs(int num_top, size_t text_offset, bool tokens_as_ids = false);
  void add(const GeneratedTokenLogprobs& logprobs);
  // `text` advances the offset; `token_id` names the token when tokens_as_ids.
  void add_unscored(const std::string& text, int32_t token_id);
  size_t text_offset() const { return text_offset_; }  // where the next token starts
  json to_json() const;

 private:
  int num_top_;
  size_t text_offset_;
  bool tokens_as_ids_;
  json tokens_, token_logprobs_, top_logprobs_, text_offsets_;
};
// The same for logprobs[begin, end).
json completion_logprobs_json(const std::vector<GeneratedTokenLogprobs>& logprobs, size_t begin,
                              size_t end, size_t text_offset, int num_top,
                              bool tokens_as_ids = false);
// vLLM's `prompt_logprobs` choice field: one entry per prompt token, null for the first, else
// {"<token id>": {"logprob", "rank", "decoded_token"}} for the prompt token and its alternatives.
json prompt_logprobs_json(const std::vector<std::optional<GeneratedTokenLogprobs>>& logprobs);
// Chat logprobs ({content: [{token, logprob, bytes, top_logprobs}]}) for logprobs[begin, end).
// tokens_as_ids: "token" (and the bytes of it) is "token_id:N".
json chat_logprobs_json(const std::vector<GeneratedTokenLogprobs>& logprobs, size_t begin,
                        size_t end, bool tokens_as_ids = false);
// "token_id:N" or the token's text.
std::string logprob_token(const TokenLogprobInfo& token, bool tokens_as_ids);

// `data: {...}\n\n`; invalid UTF-8 (a token that ends mid-character) becomes U+FFFD.
std::string sse_event(const json& payload);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";
// The one serialisation every response body uses (replaces invalid UTF-8).
std::string dump_json(const json& value);

std::string random_request_id(std::string_view prefix);  // "cmpl-<32 hex>"
int64_t unix_time_s();

}  // namespace pagoda::server
