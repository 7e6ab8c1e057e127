// The OpenAI-compatible API of `pagoda serve` over the HTTP transport (http_transport.h):
// /v1/completions, /v1/chat/completions, /v1/models, vLLM's /tokenize and /detokenize, and
// /health, /version, /metrics, with OpenAI-shaped errors for everything (unknown routes 404).
// Cheap routes answer on the transport's thread; the rest run on a small pool of request
// threads, and a generation waits for the engine without holding any thread: the engine's
// outputs wake the request (OutputQueue's listener), which writes what it has and sleeps again.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "pagoda/async_engine.h"
#include "server/engine_metrics.h"
#include "server/http_transport.h"
#include "server/openai_protocol.h"

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
  int num_http_threads = 4;            // threads that parse, template and tokenize requests
  std::string reasoning_parser;        // "" or "deepseek_r1"
  bool strict_request_fields = false;  // unknown request fields: 400 instead of a warning
  std::string version;
  // TLS, CORS, --root-path, connection limits and timeouts. Its host, port, api_key and
  // max_body_bytes are taken from the fields above.
  TransportOptions transport;
  ProtocolOptions protocol;  // --max-logprobs, --response-role, --return-tokens-as-token-ids
  // What /metrics renders: the engine's observer (AsyncEngineOptions::observer); null: only the
  // process_* series.
  std::shared_ptr<EngineMetrics> metrics;
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
  size_t num_connections() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pagoda::server
