// The HTTP front of `pagoda serve`: cpp-httplib routes for the OpenAI API (/v1/completions,
// /v1/chat/completions, /v1/models), vLLM's /tokenize and /detokenize, and /health, /version,
// /metrics; Bearer API key on every route but /health; OpenAI-shaped errors for everything,
// including unknown routes (404) and oversized bodies (413). Handlers only parse, tokenize and
// talk to the AsyncEngine; no exception leaves a handler.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "server/async_engine.h"

namespace pagoda::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                // 0: any free port (see HttpServer::bind)
  std::string api_key;            // empty: no authentication
  std::string served_model_name;  // empty: the engine's model name
  // Further names requests may use (vLLM's `--served-model-name a b`); responses and
  // /v1/models lead with the first.
  std::vector<std::string> model_aliases;
  size_t max_request_bytes = 8u << 20;
  int num_http_threads = 256;          // each open stream holds one
  std::string reasoning_parser;        // "" or "deepseek_r1"
  bool strict_request_fields = false;  // unknown request fields: 400 instead of a warning
  std::string version;
  ProtocolOptions protocol;  // --max-logprobs, --response-role, --return-tokens-as-token-ids
};

class HttpServer {
 public:
  HttpServer(AsyncEngine& engine, ServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listening socket; returns the port (useful with port 0). Throws pagoda::Error.
  int bind();
  // Serves until stop(); call bind() first.
  void listen();
  // From any thread, before or during listen(): returns once listen() has returned (at once if
  // it never began), and a listen() that begins later returns at once.
  void stop();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// Equality of two secrets in time that depends only on their lengths, not on where they differ.
bool constant_time_equals(const std::string& a, const std::string& b);

}  // namespace pagoda::server
