// Cross-origin requests from browsers, as vLLM answers them (Starlette's CORSMiddleware):
// --allowed-origins, --allowed-methods, --allowed-headers and --allow-credentials. With no
// origin allowed (Pagoda's default; vLLM's is "*") no CORS header is sent and browsers keep
// other sites' pages from calling the server.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "server/http_message.h"

namespace pagoda::server {

struct CorsPolicy {
  std::vector<std::string> allowed_origins;  // "*" allows any
  std::vector<std::string> allowed_methods = {"*"};
  std::vector<std::string> allowed_headers = {"*"};
  bool allow_credentials = false;

  bool enabled() const { return !allowed_origins.empty(); }
};

// A browser's preflight: OPTIONS with Origin and Access-Control-Request-Method.
bool is_cors_preflight(const HttpRequest& request);

// The answer to a preflight: 200 with the Access-Control-Allow-* headers, or 400 naming what is
// not allowed.
HttpResponse answer_cors_preflight(const CorsPolicy& policy, const HttpRequest& request);

// Headers to add to the response of an ordinary request that came with `origin` ("" when it
// came with none, or the origin is not allowed: then nothing).
HttpHeaders cors_response_headers(const CorsPolicy& policy, std::string_view origin);

// A flag's values as vLLM takes them: a JSON list ('["a", "b"]'), or plain values, each of which
// may hold several separated by commas.
std::vector<std::string> parse_cors_list(const std::vector<std::string>& values);

}  // namespace pagoda::server
