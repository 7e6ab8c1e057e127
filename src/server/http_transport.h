// The network side of `pagoda serve`: HTTP/1.1 (and HTTPS) on Boost.Beast over Asio, event
// driven, so that an open connection costs a few kilobytes and no thread. It enforces the limits
// that keep one client from hurting the others before any route runs:
// - a deadline for a request's headers and for its body, and an idle timeout between requests;
// - a cap on open connections; at the cap the connection that has waited longest without sending
//   a request is closed to make room, else the new one is refused with 503;
// - bounded memory per connection: headers up to max_header_bytes, bodies up to max_body_bytes
//   whether framed by Content-Length or chunked; compressed bodies are refused (415);
// - strict framing: conflicting lengths, Content-Length with Transfer-Encoding, or a transfer
//   coding other than chunked get 400 and the connection is closed;
// - the client's address against --allowed-clients, when the connection is accepted: a client
//   outside the list gets 403 (OpenAI's error shape; over TLS the connection is just closed) and
//   not one byte of it is read;
// - the API key, checked as soon as the headers are in, before the body is read;
// - CORS and --root-path, answered here so that the routes see only their own requests.
// Keep-alive and pipelining follow HTTP/1.1: requests on one connection are answered in order.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/client_allow_list.h"
#include "server/cors.h"
#include "server/http_message.h"

namespace pagoda::server {

struct TransportOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port
  // HTTPS when both are set (PEM files); the files are read at bind().
  std::string ssl_certfile;
  std::string ssl_keyfile;
  std::string ssl_ca_certs;  // with ssl_cert_reqs > 0: verify client certificates
  int ssl_cert_reqs = 0;     // as vLLM/uvicorn: 0 none, 1 optional, 2 required
  std::string root_path;     // a prefix a proxy may leave on every path ("/pagoda")
  std::string api_key;       // "": no authentication
  std::vector<std::string> open_paths = {"/health"};  // served without the key
  CorsPolicy cors;
  ClientAllowList allowed_clients;  // everyone by default
  size_t max_connections = 4096;
  size_t max_header_bytes = 64 << 10;
  size_t max_body_bytes = 8 << 20;
  // A stream whose client reads more slowly than the engine writes may hold this much unsent
  // output; past it the connection is closed (and the request aborted).
  size_t max_pending_stream_bytes = 64 << 20;
  std::chrono::milliseconds header_timeout{10'000};  // first byte of a request → its headers
  std::chrono::milliseconds body_timeout{60'000};    // headers → the whole body
  std::chrono::milliseconds keep_alive_timeout{
      5'000};                                       // a response → the next request's first byte
  std::chrono::milliseconds write_timeout{60'000};  // one write to the client
  int num_io_threads = 1;
  // Called on a transport thread with every response's method, path (after --root-path) and
  // status, as its head is queued: the answers of the routes and of the transport's own checks.
  // Connections refused before a request was read are not requests and are not reported.
  std::function<void(const std::string& method, const std::string& path, int status)> on_response;
};

class HttpTransport {
 public:
  HttpTransport(TransportOptions options, HttpHandler handler);
  ~HttpTransport();
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  // Opens the listening socket (and the TLS context); returns the port. Throws pagoda::Error
  // with a clear message when the port is taken or a certificate cannot be read.
  int bind();
  // Serves until stop(). The calling thread is one of the I/O threads.
  void run();
  // From any thread, before or during run(): closes the listener and every connection; run()
  // returns once they are gone. A run() that begins after stop() returns at once.
  void stop();

  size_t num_connections() const;

  class Impl;  // named by the connections in the .cpp

 private:
  std::shared_ptr<Impl> impl_;
};

// Equality of two secrets in time that depends only on their lengths, not on where they differ.
bool constant_time_equals(const std::string& a, const std::string& b);

}  // namespace pagoda::server
