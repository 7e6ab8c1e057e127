// `pagoda serve`'s flags for the HTTP front, with vLLM's names: HTTPS (--ssl-*), CORS
// (--allowed-origins and friends), the client address filter (--allowed-clients), --root-path, and
// Pagoda's own limits (connection cap, header and keep-alive timeouts). They fill
// ServerOptions::transport.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "server/http_server.h"

namespace pagoda::cli {

struct HttpFlags {
  std::vector<std::string> allowed_origins, allowed_methods, allowed_headers;
  std::vector<std::string> allowed_clients;
  double header_timeout_s = 10;
  double keep_alive_timeout_s = 5;
};

void add_http_options(CLI::App* serve, HttpFlags& flags, server::ServerOptions& server);

// After parsing: checks the values and folds them (and VLLM_HTTP_TIMEOUT_KEEP_ALIVE) into
// server.transport. Throws pagoda::Error.
void apply_http_options(const CLI::App& serve, const HttpFlags& flags,
                        server::ServerOptions& server);

}  // namespace pagoda::cli
