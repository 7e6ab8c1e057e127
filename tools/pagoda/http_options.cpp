#include "tools/pagoda/http_options.h"

#include <chrono>
#include <cmath>

#include <spdlog/spdlog.h>

#include "server/cors.h"
#include "tools/pagoda/engine_options.h"
#include "util/error.h"

namespace pagoda::cli {
namespace {

std::chrono::milliseconds seconds(const char* flag, double s) {
  if (!std::isfinite(s) || s <= 0 || s > 86400)
    fail("{} must be between 0 and 86400 seconds, got {}", flag, s);
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
}

}  // namespace

void add_http_options(CLI::App* serve, HttpFlags& f, server::ServerOptions& s) {
  server::TransportOptions& t = s.transport;
  serve->add_option("--ssl-certfile", t.ssl_certfile, "Serve HTTPS with this certificate (PEM)");
  serve->add_option("--ssl-keyfile", t.ssl_keyfile, "The private key of --ssl-certfile (PEM)");
  serve->add_option("--ssl-ca-certs", t.ssl_ca_certs,
                    "CA certificates (PEM) that client certificates are checked against");
  serve
      ->add_option("--ssl-cert-reqs", t.ssl_cert_reqs,
                   "Client certificates: 0 not asked, 1 checked if sent, 2 required")
      ->check(CLI::Range(0, 2))
      ->capture_default_str();
  serve->add_option("--root-path", t.root_path,
                    "A path prefix a proxy leaves on requests (e.g. /pagoda): stripped before "
                    "routing");
  serve
      ->add_option("--allowed-origins", f.allowed_origins,
                   "CORS: origins browsers may call from, as a JSON list or comma-separated "
                   "(default: none; vLLM's default is '[\"*\"]')")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  serve->add_option("--allowed-methods", f.allowed_methods, "CORS: methods allowed (default: all)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  serve
      ->add_option("--allowed-headers", f.allowed_headers,
                   "CORS: request headers allowed (default: all)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  serve->add_flag("--allow-credentials", t.cors.allow_credentials,
                  "CORS: let browsers send credentials");
  serve
      ->add_option("--allowed-clients", f.allowed_clients,
                   "Serve only clients whose address is in these networks (CIDR or single "
                   "addresses, IPv4 and IPv6, comma-separated, e.g. 10.0.0.0/8,::1); others get "
                   "403 before anything is read, /health included (env PAGODA_ALLOWED_CLIENTS; "
                   "default: everyone)")
      ->envname("PAGODA_ALLOWED_CLIENTS")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  serve
      ->add_option("--max-connections", t.max_connections,
                   "Open connections at most; at the cap the one idle longest is closed, or the "
                   "new one refused with 503")
      ->check(CLI::Range(size_t{1}, size_t{1} << 20))
      ->capture_default_str();
  serve
      ->add_option("--http-header-timeout", f.header_timeout_s,
                   "Seconds a client has to send a request's headers")
      ->capture_default_str();
  serve
      ->add_option("--http-keep-alive-timeout", f.keep_alive_timeout_s,
                   "Seconds an idle connection stays open (env VLLM_HTTP_TIMEOUT_KEEP_ALIVE)")
      ->envname("PAGODA_HTTP_TIMEOUT_KEEP_ALIVE")
      ->capture_default_str();
  serve
      ->add_option("--h11-max-incomplete-event-size", t.max_header_bytes,
                   "Largest request head (request line and headers) in bytes (431 above)")
      ->check(CLI::Range(size_t{1024}, size_t{64} << 20))
      ->capture_default_str();
}

void apply_http_options(const CLI::App& serve, const HttpFlags& f, server::ServerOptions& s) {
  server::TransportOptions& t = s.transport;
  t.cors.allowed_origins = server::parse_cors_list(f.allowed_origins);
  if (!f.allowed_methods.empty())
    t.cors.allowed_methods = server::parse_cors_list(f.allowed_methods);
  if (!f.allowed_headers.empty())
    t.cors.allowed_headers = server::parse_cors_list(f.allowed_headers);
  t.allowed_clients = server::ClientAllowList::parse(f.allowed_clients);
  if (!t.allowed_clients.allows_everyone())
    spdlog::info("serving only clients in: {}", t.allowed_clients.describe());
  t.header_timeout = seconds("--http-header-timeout", f.header_timeout_s);
  double keep_alive = f.keep_alive_timeout_s;
  if (serve.count("--http-keep-alive-timeout") == 0) {
    if (const std::string v = environment("VLLM_HTTP_TIMEOUT_KEEP_ALIVE"); !v.empty()) {
      try {
        keep_alive = std::stod(v);
      } catch (const std::exception&) {
        fail("VLLM_HTTP_TIMEOUT_KEEP_ALIVE must be a number of seconds, got '{}'", v);
      }
    }
  }
  t.keep_alive_timeout = seconds("--http-keep-alive-timeout", keep_alive);
  if (!t.root_path.empty()) {
    if (t.root_path.front() != '/') t.root_path.insert(0, "/");
    while (t.root_path.size() > 1 && t.root_path.back() == '/') t.root_path.pop_back();
    if (t.root_path == "/") t.root_path.clear();
  }
  if ((t.ssl_certfile.empty()) != (t.ssl_keyfile.empty()))
    fail("HTTPS needs both --ssl-certfile and --ssl-keyfile");
  if (t.cors.enabled()) {
    spdlog::info("CORS: origins {}", fmt::join(t.cors.allowed_origins, ", "));
  }
}

}  // namespace pagoda::cli
